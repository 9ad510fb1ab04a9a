"""Package registries on loopback, one tiny package in each, for the package tests.

One HTTP server serves every ecosystem from memory under its own prefix (a PyPI
simple index, an npm registry, a cargo sparse index, a static gem source, a go
module proxy), recording every path asked for. apt gets a flat repository
read through apt's ``copy:`` method. The package builders use the machine's own
tools (``dpkg-deb``, ``gem``) where a format is theirs alone.
"""

from __future__ import annotations

import base64
import hashlib
import io
import ipaddress
import json
import shutil
import socket
import subprocess
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WHEEL = "steadprobe-1.0-py3-none-any.whl"
NPM_NAME = "steadprobe-npm"
CRATE = "steadprobe-cargo"
GEM = "steadprobe"
GO_MODULE = "example.com/steadprobe"
TOOL_SECONDS = 120
HAS_GEM = shutil.which("gem", path="/usr/bin") is not None


def loopback_name() -> tuple[str, str] | None:
    """A host name, not ``localhost``, that resolves only to loopback, and its address.

    go's HTTP client never sends ``localhost`` or an IP literal through a proxy,
    so its registry must be named otherwise to reach the installer's egress proxy.
    """
    name = socket.gethostname()
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name, None, socket.AF_INET)}
    except OSError:
        return None
    if name == "localhost" or not found:
        return None
    if not all(ipaddress.ip_address(address).is_loopback for address in found):
        return None
    return name, sorted(found)[0]


class Registry:
    """Serves ``files`` (path -> body) on loopback; 404 for anything else."""

    def __init__(self, root: Path) -> None:
        named = loopback_name()
        address = named[1] if named else "127.0.0.1"
        self.files: dict[str, bytes] = {}
        self.requests: list[str] = []
        files, requests = self.files, self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                requests.append(path)
                body = files.get(path)
                self.send_response(200 if body is not None else 404)
                if path.endswith("/"):
                    self.send_header("Content-Type", "text/html")  # pip insists
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        port = self.server.server_address[1]
        self.url = f"http://{address}:{port}"
        self.named_url = f"http://{named[0]}:{port}" if named else None
        self.pip_url = add_wheel(self.files, self.url)
        self.npm_url = add_npm_package(self.files, self.url)
        self.cargo_url = add_crate(self.files, self.url)
        # Building a gem index takes ruby's own tools; without them the gem test skips.
        self.gem_url = add_gem(self.files, self.url, root / "gem") if HAS_GEM else None
        self.go_url = add_go_module(self.files, self.named_url or self.url)
        self.apt_sources = apt_repository(root / "apt")
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Registry:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def env(self) -> dict[str, str]:
        """The sandbox host's settings that point every installer here."""
        return {
            "STEAD_PIP_INDEX_URL": self.pip_url,
            "STEAD_NPM_REGISTRY": self.npm_url,
            "STEAD_CARGO_INDEX_URL": self.cargo_url,
            "STEAD_GOPROXY": self.go_url,
            "STEAD_GOSUMDB": "off",
            "STEAD_APT_SOURCES": self.apt_sources,
        } | ({"STEAD_GEM_SOURCE": self.gem_url} if self.gem_url else {})


def add_wheel(files: dict[str, bytes], base: str) -> str:
    """``steadprobe`` 1.0, a pure-Python wheel with ``steadprobe.VALUE = 42``."""
    contents = {
        "steadprobe.py": b"VALUE = 42\n",
        "steadprobe-1.0.dist-info/METADATA": (
            b"Metadata-Version: 2.1\nName: steadprobe\nVersion: 1.0\n"
        ),
        "steadprobe-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: stead-tests\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-any\n"
        ),
    }
    record = ""
    for name, data in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "steadprobe-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, data in contents.items():
            wheel.writestr(name, data)
        wheel.writestr("steadprobe-1.0.dist-info/RECORD", record)
    data = buffer.getvalue()
    files[f"/pip/files/{WHEEL}"] = data
    digest = hashlib.sha256(data).hexdigest()
    files["/pip/simple/steadprobe/"] = (
        f'<a href="../../files/{WHEEL}#sha256={digest}">{WHEEL}</a>\n'.encode()
    )
    return f"{base}/pip/simple/"


def add_npm_package(files: dict[str, bytes], base: str) -> str:
    """``steadprobe-npm`` 1.0.0, whose command ``steadprobe`` prints 42."""
    tarball = _tar_gz(
        {
            "package/package.json": json.dumps(
                {"name": NPM_NAME, "version": "1.0.0", "bin": {"steadprobe": "cli.js"}}
            ).encode(),
            "package/cli.js": b"#!/usr/bin/env node\nconsole.log(6 * 7);\n",
        }
    )
    path = f"/npm/{NPM_NAME}/-/{NPM_NAME}-1.0.0.tgz"
    files[path] = tarball
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
    version = {
        "name": NPM_NAME,
        "version": "1.0.0",
        "bin": {"steadprobe": "cli.js"},
        "dist": {
            "tarball": base + path,
            "shasum": hashlib.sha1(tarball).hexdigest(),
            "integrity": integrity,
        },
    }
    files[f"/npm/{NPM_NAME}"] = json.dumps(
        {"name": NPM_NAME, "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": version}}
    ).encode()
    return f"{base}/npm/"


def add_crate(files: dict[str, bytes], base: str) -> str:
    """A sparse index holding ``steadprobe-cargo`` 1.0.0, a binary printing 42."""
    top = f"{CRATE}-1.0.0"
    crate = _tar_gz(
        {
            f"{top}/Cargo.toml": (
                f'[package]\nname = "{CRATE}"\nversion = "1.0.0"\nedition = "2021"\n'
            ).encode(),
            f"{top}/src/main.rs": b'fn main() {\n    println!("{}", 6 * 7);\n}\n',
        }
    )
    files[f"/cargo/dl/{CRATE}/1.0.0/download"] = crate
    files["/cargo/index/config.json"] = json.dumps({"dl": f"{base}/cargo/dl"}).encode()
    entry = {
        "name": CRATE,
        "vers": "1.0.0",
        "deps": [],
        "cksum": hashlib.sha256(crate).hexdigest(),
        "features": {},
        "yanked": False,
    }
    files[f"/cargo/index/{CRATE[:2]}/{CRATE[2:4]}/{CRATE}"] = json.dumps(entry).encode() + b"\n"
    return f"{base}/cargo/index/"


def add_gem(files: dict[str, bytes], base: str, work: Path) -> str:
    """A static gem source (``gem generate_index``) holding ``steadprobe`` 1.0.0:
    ``Steadprobe::VALUE`` is 42 and the command ``steadprobe-gem`` prints it."""
    (work / "lib").mkdir(parents=True)
    (work / "bin").mkdir()
    (work / "lib" / "steadprobe.rb").write_text("module Steadprobe\n  VALUE = 42\nend\n")
    (work / "bin" / "steadprobe-gem").write_text(
        "#!/usr/bin/env ruby\nrequire 'steadprobe'\nputs Steadprobe::VALUE\n"
    )
    (work / f"{GEM}.gemspec").write_text(
        "Gem::Specification.new do |s|\n"
        f"  s.name = '{GEM}'\n  s.version = '1.0.0'\n  s.summary = 'a probe'\n"
        "  s.authors = ['stead tests']\n  s.license = 'MIT'\n"
        "  s.files = ['lib/steadprobe.rb', 'bin/steadprobe-gem']\n"
        "  s.executables = ['steadprobe-gem']\nend\n"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "LANG": "C.UTF-8"}
    _run(["gem", "build", f"{GEM}.gemspec"], work, env)
    index = work / "index"
    (index / "gems").mkdir(parents=True)
    (work / f"{GEM}-1.0.0.gem").rename(index / "gems" / f"{GEM}-1.0.0.gem")
    _run(["gem", "generate_index", "--directory", str(index)], work, env)
    for path in index.rglob("*"):
        if path.is_file():
            files[f"/gems/{path.relative_to(index)}"] = path.read_bytes()
    return f"{base}/gems/"


def add_go_module(files: dict[str, bytes], base: str) -> str:
    """A module proxy holding ``example.com/steadprobe`` v1.0.0, a command printing 42."""
    prefix = f"{GO_MODULE}@v1.0.0/"
    mod = f"module {GO_MODULE}\n\ngo 1.19\n".encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(prefix + "go.mod", mod)
        archive.writestr(
            prefix + "main.go",
            'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println(6 * 7)\n}\n',
        )
    at = f"/go/{GO_MODULE}/@v"
    files[f"{at}/list"] = b"v1.0.0\n"
    files[f"{at}/v1.0.0.info"] = b'{"Version":"v1.0.0","Time":"2024-01-01T00:00:00Z"}'
    files[f"{at}/v1.0.0.mod"] = mod
    files[f"{at}/v1.0.0.zip"] = buffer.getvalue()
    return f"{base}/go"


def apt_repository(root: Path) -> str:
    """A flat apt repository holding one package with one command; its sources line."""
    tree = root / "build"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "usr" / "bin").mkdir(parents=True)
    (tree / "DEBIAN" / "control").write_text(
        "Package: steadprobe-apt\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: stead tests <tests@stead.invalid>\nDescription: a probe\n"
    )
    command = tree / "usr" / "bin" / "steadprobe-apt"
    command.write_text("#!/bin/sh\necho from apt\n")
    command.chmod(0o755)
    repo = root / "repo"
    repo.mkdir()
    deb = repo / "steadprobe-apt_1.0_all.deb"
    _run(["dpkg-deb", "--build", "--root-owner-group", str(tree), str(deb)], root, None)
    data = deb.read_bytes()
    control = (tree / "DEBIAN" / "control").read_text()
    (repo / "Packages").write_text(
        control
        + f"Filename: ./{deb.name}\nSize: {len(data)}\n"
        + f"SHA256: {hashlib.sha256(data).hexdigest()}\n\n"
    )
    return f"deb [trusted=yes] copy:{repo} ./"


def _tar_gz(contents: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in contents.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _run(command: list[str], cwd: Path, env: dict[str, str] | None) -> None:
    subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, timeout=TOOL_SECONDS)
