"""A git smart-HTTP server over HTTPS on loopback that requires a token: ``git
http-backend`` run as CGI behind ``http.server``, answering 401 to a request
without ``Authorization: Basic x-access-token:<token>`` for one of the tokens it
accepts now (``GitOrigin.accepted``, changed by a test to revoke one). A
request under ``GitOrigin.gated`` waits for ``gate`` (so a clone can be caught
in flight). It records every request's path and Authorization, and logs
nothing else."""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import trustme

from tests.web_origins import serving

BACKEND_SECONDS = 30.0


@dataclass
class GitOrigin:
    root: Path
    accepted: set[str]
    port: int = 0
    seen: list[tuple[str, str, int]] = field(default_factory=list)
    """(path, Authorization, status) of each request."""
    gated: str | None = None
    gate: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    """Set when a request under ``gated`` came in (and waits for ``gate``)."""


def basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


@contextmanager
def git_origin(ca: trustme.CA, name: str, root: Path, token: str) -> Iterator[GitOrigin]:
    """Serves the bare repositories under ``root`` at ``https://<name>:<port>/<path>``."""
    origin = GitOrigin(root, {token})

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            if origin.gated is not None and self.path.startswith(origin.gated):
                origin.arrived.set()
                origin.gate.wait(BACKEND_SECONDS)
            authorization = self.headers.get("Authorization", "")
            body = self._body()
            if authorization not in {basic(t) for t in origin.accepted}:
                origin.seen.append((self.path, authorization, 401))
                self._send(401, [("WWW-Authenticate", 'Basic realm="git"')], b"")
                return
            status, headers, payload = self._backend(body)
            origin.seen.append((self.path, authorization, status))
            self._send(status, headers, payload)

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                self.rfile.readline()
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _backend(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            path, _, query = self.path.partition("?")
            env = {
                "PATH": "/usr/bin:/bin",
                "GIT_PROJECT_ROOT": str(origin.root),
                "GIT_HTTP_EXPORT_ALL": "1",
                "REQUEST_METHOD": self.command,
                "PATH_INFO": path,
                "QUERY_STRING": query,
                "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                "CONTENT_LENGTH": str(len(body)),
                "REMOTE_USER": "x-access-token",
                "REMOTE_ADDR": "127.0.0.1",
                "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            }
            done = subprocess.run(
                ["git", "http-backend"],
                input=body,
                capture_output=True,
                env=env,
                timeout=BACKEND_SECONDS,
                check=False,
            )
            head, _, payload = done.stdout.partition(b"\r\n\r\n")
            status, headers = 200, []
            for line in head.decode("latin-1").split("\r\n"):
                key, _, value = line.partition(":")
                if key.lower() == "status":
                    status = int(value.split()[0])
                elif key:
                    headers.append((key, value.strip()))
            return status, headers, payload

        def _send(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler), ca, (name,)) as port:
        origin.port = port
        yield origin


def make_repository(root: Path, name: str) -> dict[str, str]:
    """A bare repository ``root/<name>`` whose default branch ``main`` has two
    commits and whose branch ``feature`` a third; the commits' ids by name."""
    work = root / f"{name}-work"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(work)]
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    ids = {}
    for text in ("one", "two", "three"):
        if text == "three":
            subprocess.run([*git, "checkout", "-q", "-b", "feature"], check=True)
        (work / "README").write_text(text + "\n")
        subprocess.run([*git, "add", "README"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", text], check=True)
        ids[text] = subprocess.run(
            [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
        ).stdout.strip()
    bare = root / name
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "symbolic-ref", "HEAD", "refs/heads/main"], check=True)
    return ids
