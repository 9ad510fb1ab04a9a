"""A real ``stead serve`` in a subprocess, for tests and benchmarks.

Starts on a free loopback port with its own data directory, waits until the
API answers, and can be killed with SIGKILL and restarted on the same data.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Protocol

import httpx2

from stead.testing.client_tls import client_tls
from stead.testing.forker import ServeForker, launch

SCRUBBED = frozenset({"ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY"})
KEY_PATTERN = re.compile(r"sk-stead-[A-Za-z0-9_-]+")
START_TIMEOUT = 60.0
PORT_ATTEMPTS = 3
LISTEN = "0A"
"""The LISTEN state in /proc/net/tcp."""


class PortTaken(RuntimeError):
    """Another process bound the server's port before it could."""


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the TCP socket listening on ``port`` (Linux /proc)."""
    inodes: set[str] = set()
    try:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
        table = Path(f"/proc/{pid}/net/tcp").read_text()
    except OSError:  # the process ended, or closed an fd while we read
        return False
    for row in table.splitlines()[1:]:
        fields = row.split()
        local, state, inode = fields[1], fields[3], fields[9]
        if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port and inode in inodes:
            return True
    return False


class _Child(Protocol):
    """What this module needs of a process: ``subprocess.Popen`` or a forked server."""

    @property
    def pid(self) -> int: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerProcess:
    """``forker``, if given, starts the process by forking instead of a new interpreter."""

    def __init__(
        self,
        data_dir: Path,
        *,
        env: dict[str, str] | None = None,
        forker: ServeForker | None = None,
    ) -> None:
        self.data_dir = data_dir
        self._use_port(free_port())
        self.first_key: str | None = None
        self._env = env or {}
        self._forker = forker
        self._process: _Child | None = None
        self._log: IO[bytes] | None = None
        self.log_path = data_dir / "serve.log"
        self._log_start = 0

    def start(self) -> ServerProcess:
        """Launches the server and waits until the API answers."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.launch()
            try:
                self._wait_ready()
                break
            except PortTaken:
                # free_port's port was free when asked, but any process may bind
                # it before the server does; on a busy machine one sometimes does.
                if attempt == PORT_ATTEMPTS:
                    raise
                self._close_log()
                self._use_port(free_port())
        found = KEY_PATTERN.search(self.log_path.read_text(errors="replace"))
        if found and self.first_key is None:
            self.first_key = found.group(0)
        return self

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def launch(self) -> ServerProcess:
        """Starts the process without waiting for it (it may die at once, on purpose)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Inherited model credentials never reach a test server: only what the
        # caller passes (normally a FakeModel's address) does.
        inherited = {
            k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("STEAD_")
        }
        env = {
            **inherited,
            "STEAD_DATA_DIR": str(self.data_dir),
            "STEAD_PORT": str(self.port),
            "STEAD_HOST": "127.0.0.1",
            # A test names the sandbox host it wants; none is started behind its back.
            "STEAD_SANDBOX_HOST_AUTOSTART": "false",
            **self._env,
        }
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._process, self._log = launch(("serve",), env, self.log_path, self._forker)
        return self

    def _wait_ready(self) -> None:
        with httpx2.Client(verify=client_tls(), timeout=1.0) as http:
            self._poll_ready(http)

    def _poll_ready(self, http: httpx2.Client) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                logged = self.log_path.read_bytes()[self._log_start :].lower()
                if b"address already in use" in logged:
                    raise PortTaken(f"port {self.port} was taken:\n{self.log_text()}")
                raise RuntimeError(f"stead serve exited early:\n{self.log_text()}")
            try:
                # Any answer (401 without a key) means the API is up; the OpenAPI
                # document would cost a second to build on first request.
                http.get(f"{self.url}/v1/agents")
            except httpx2.TransportError:
                pass
            else:
                # The answer may come from another process that took the port;
                # this server has then not bound it yet, or will fail to.
                if listens(self._process.pid, self.port):
                    return
            time.sleep(0.05)
        raise RuntimeError(
            f"stead serve did not answer within {START_TIMEOUT}s:\n{self.log_text()}"
        )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def wait_exit(self, timeout: float) -> bool:
        """Waits (bounded) for the process to end by itself; True if it did."""
        assert self._process is not None
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=30)
        self._close_log()

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=15)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def database_url(self) -> str:
        """The URL of the server's store: its ``STEAD_DATABASE_URL``, else the
        SQLite file in its data directory."""
        return self._env.get("STEAD_DATABASE_URL") or f"sqlite:///{self.data_dir / 'stead.db'}"

    def create_key(self, *, new_workspace: str | None = None, admin: bool = False) -> str:
        """A key made with ``stead keys create`` (in a new workspace if named; an
        operator's if ``admin``), on the server's store (its ``STEAD_DATABASE_URL``
        too, when it has one)."""
        command: tuple[str, ...] = ("keys", "create", "--json")
        if new_workspace:
            command += ("--new-workspace", new_workspace)
        if admin:
            command += ("--admin",)
        # The server's own settings: on PostgreSQL the key goes to its database.
        env = {**os.environ, **self._env, "STEAD_DATA_DIR": str(self.data_dir)}
        if self._forker is not None:  # forked: no second of imports per key
            output = self._forker.run(command, env, timeout=60)
        else:
            args = [sys.executable, "-m", "stead", *command]
            output = subprocess.run(
                args, env=env, check=True, capture_output=True, timeout=60
            ).stdout.decode()
        found = KEY_PATTERN.search(output)
        assert found, output
        return found.group(0)
