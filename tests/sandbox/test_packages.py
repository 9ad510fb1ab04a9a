"""Environment packages (pip, npm, apt) are installed once per package set, inside a
sandbox of their own, through the egress proxy, from a package index on
loopback; a second sandbox with the same packages reuses them."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stead.sandbox import HostSandbox, PackagesUnavailable
from stead.testing import HostProcess
from tests.sandbox.conftest import client_of, config, new_id, requires_isolation

pytestmark = [pytest.mark.anyio, requires_isolation]

WHEEL = "steadprobe-1.0-py3-none-any.whl"


def build_wheel() -> bytes:
    files = {
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
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "steadprobe-1.0.dist-info/RECORD,,\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("steadprobe-1.0.dist-info/RECORD", record)
    return buffer.getvalue()


class Index:
    def __init__(self, root: Path) -> None:
        wheel = build_wheel()
        (root / "files").mkdir(parents=True)
        (root / "files" / WHEEL).write_bytes(wheel)
        (root / "simple" / "steadprobe").mkdir(parents=True)
        digest = hashlib.sha256(wheel).hexdigest()
        (root / "simple" / "steadprobe" / "index.html").write_text(
            f'<a href="../../files/{WHEEL}#sha256={digest}">{WHEEL}</a>\n'
        )
        self.requests: list[str] = []
        requests = self.requests

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]

            def do_GET(self) -> None:
                requests.append(self.path)
                super().do_GET()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Index]:
    served = Index(tmp_path_factory.mktemp("index"))
    thread = threading.Thread(target=served.server.serve_forever, daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture(scope="module")
def package_host(tmp_path_factory: pytest.TempPathFactory, index: Index) -> Iterator[HostProcess]:
    process = HostProcess(
        tmp_path_factory.mktemp("package-host") / "state",
        env={"STEAD_PIP_INDEX_URL": index.url},
    ).start()
    yield process
    process.stop()


async def test_pip_packages_install_once_per_package_set(
    package_host: HostProcess, index: Index
) -> None:
    client = client_of(package_host)
    wanted = config(packages={"pip": ["steadprobe==1.0"]})
    first, second = (HostSandbox(client, new_id(), wanted) for _ in range(2))
    try:
        probe = "python -c 'import steadprobe; print(steadprobe.VALUE)'"
        result = await first.exec(probe, op_key="probe", timeout=30)
        assert (result.exit_code, result.output) == (0, "42\n")
        fetched = list(index.requests)
        assert any(WHEEL in path for path in fetched)
        result = await second.exec(probe, op_key="probe", timeout=30)
        assert (result.exit_code, result.output) == (0, "42\n")
        assert index.requests == fetched  # the second sandbox installed nothing
        denied = await first.exec("touch /opt/stead/x", op_key="ro", timeout=10)
        assert denied.exit_code != 0  # installed packages are read-only in sandboxes
    finally:
        for sandbox in (first, second):
            await client.destroy(sandbox.sandbox_id)
        await client.aclose()


async def test_a_package_that_cannot_install_is_a_clear_error(package_host: HostProcess) -> None:
    client = client_of(package_host)
    sandbox = HostSandbox(client, new_id(), config(packages={"pip": ["no-such-package-x"]}))
    try:
        with pytest.raises(PackagesUnavailable, match="no-such-package-x"):
            await sandbox.exec("true", op_key="k", timeout=10)
        refused = HostSandbox(client, new_id(), config(packages={"cargo": ["ripgrep"]}))
        with pytest.raises(PackagesUnavailable, match="cargo"):
            await refused.exec("true", op_key="k", timeout=10)
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()


def npm_tarball() -> bytes:
    files = {
        "package/package.json": json.dumps(
            {"name": NPM_NAME, "version": "1.0.0", "bin": {"steadprobe": "cli.js"}}
        ).encode(),
        "package/cli.js": b"#!/usr/bin/env node\nconsole.log(6 * 7);\n",
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


NPM_NAME = "steadprobe-npm"


class NpmRegistry:
    """The two documents npm fetches: the package's metadata and its tarball."""

    def __init__(self) -> None:
        tarball = npm_tarball()
        self.requests: list[str] = []
        requests = self.requests
        integrity = "sha512-" + base64.b64encode(hashlib.sha512(tarball).digest()).decode()
        holder: dict[str, bytes] = {}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                requests.append(self.path)
                body = holder.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        tarball_path = f"/{NPM_NAME}/-/{NPM_NAME}-1.0.0.tgz"
        holder[tarball_path] = tarball
        holder[f"/{NPM_NAME}"] = json.dumps(
            {
                "name": NPM_NAME,
                "dist-tags": {"latest": "1.0.0"},
                "versions": {
                    "1.0.0": {
                        "name": NPM_NAME,
                        "version": "1.0.0",
                        "bin": {"steadprobe": "cli.js"},
                        "dist": {
                            "tarball": self.url.rstrip("/") + tarball_path,
                            "shasum": hashlib.sha1(tarball).hexdigest(),
                            "integrity": integrity,
                        },
                    }
                },
            }
        ).encode()


@pytest.fixture(scope="module")
def npm_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HostProcess, NpmRegistry]]:
    registry = NpmRegistry()
    thread = threading.Thread(target=registry.server.serve_forever, daemon=True)
    thread.start()
    process = HostProcess(
        tmp_path_factory.mktemp("npm-host") / "state",
        env={"STEAD_NPM_REGISTRY": registry.url},
    ).start()
    yield process, registry
    process.stop()
    registry.server.shutdown()
    registry.server.server_close()


async def test_npm_packages_install_with_their_commands_on_path(
    npm_host: tuple[HostProcess, NpmRegistry],
) -> None:
    process, registry = npm_host
    client = client_of(process)
    sandbox = HostSandbox(client, new_id(), config(packages={"npm": [NPM_NAME]}))
    try:
        result = await sandbox.exec("steadprobe", op_key="probe", timeout=30)
        assert (result.exit_code, result.output) == (0, "42\n")
        assert f"/{NPM_NAME}" in registry.requests
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()


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
    subprocess.run(
        ["dpkg-deb", "--build", "--root-owner-group", str(tree), str(deb)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    data = deb.read_bytes()
    control = (tree / "DEBIAN" / "control").read_text()
    (repo / "Packages").write_text(
        control
        + f"Filename: ./{deb.name}\nSize: {len(data)}\n"
        + f"SHA256: {hashlib.sha256(data).hexdigest()}\n\n"
    )
    return f"deb [trusted=yes] copy:{repo} ./"


async def test_apt_packages_are_unpacked_without_touching_the_machine(tmp_path: Path) -> None:
    process = HostProcess(
        tmp_path / "state", env={"STEAD_APT_SOURCES": apt_repository(tmp_path)}
    ).start()
    client = client_of(process)
    sandbox = HostSandbox(client, new_id(), config(packages={"apt": ["steadprobe-apt"]}))
    try:
        result = await sandbox.exec("steadprobe-apt", op_key="probe", timeout=30)
        assert (result.exit_code, result.output) == (0, "from apt\n")
        assert not machine_has("steadprobe-apt")
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
        process.stop()


def machine_has(package: str) -> bool:
    """Whether the machine itself has the package: its file, or dpkg's record of it."""
    if Path("/usr/bin", package).exists():
        return True
    query = subprocess.run(["dpkg-query", "-W", package], capture_output=True, timeout=30)
    return query.returncode == 0
