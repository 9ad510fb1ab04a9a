"""A real ``stead sandbox-host`` in a subprocess, for tests and benchmarks.

Each has its own state directory, and so its own cgroups and its own uid
range, claimed in the machine's registry like any sandbox host's: hosts
started by different tests, or beside an operator's, never share either.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from stead.sandbox import PROTOCOL_VERSION
from stead.testing.forker import ForkedServer, ServeForker, launch

START_TIMEOUT = 60.0


class HostProcess:
    """``forker``: the host is forked from it (``stead sandbox-host`` run in a
    process that imported stead once) instead of started in a fresh interpreter."""

    def __init__(
        self,
        state_dir: Path,
        *,
        blob_url: str | None = None,
        work_dir: Path | None = None,
        env: dict[str, str] | None = None,
        forker: ServeForker | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.blob_url = blob_url or f"file://{(state_dir.parent / 'blobs').resolve()}"
        self.socket_path = state_dir / "host.sock"
        if work_dir is None:
            # Under /tmp, not the test's own (0700) directory: sandbox uids must reach it.
            work_dir = Path(tempfile.mkdtemp(prefix="stead-work-", dir="/tmp"))
            os.chmod(work_dir, 0o711)
        self.work_dir = work_dir
        self.log_path = state_dir.parent / f"{state_dir.name}.log"
        self._env = env or {}
        self._forker = forker
        self._process: subprocess.Popen[bytes] | ForkedServer | None = None
        self._log: IO[bytes] | None = None

    @property
    def settings_env(self) -> dict[str, str]:
        """What a ``stead serve`` needs to use this host."""
        return {
            "STEAD_SANDBOX": "bwrap",
            "STEAD_SANDBOX_HOST": str(self.socket_path),
            "STEAD_SANDBOX_HOST_AUTOSTART": "false",
        }

    def start(self) -> HostProcess:
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("STEAD_")}
        env = {
            **inherited,
            "STEAD_DATA_DIR": str(self.state_dir.parent),
            "STEAD_SANDBOX_HOST_STATE_DIR": str(self.state_dir),
            "STEAD_BLOB_URL": self.blob_url,
            "STEAD_SANDBOX_WORK_DIR": str(self.work_dir),
            **self._env,
        }
        self._process, self._log = launch(("sandbox-host",), env, self.log_path, self._forker)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"sandbox host exited:\n{self.log_text()}")
            try:
                self.call({"op": "ping"})
                return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"sandbox host did not start:\n{self.log_text()}")

    def call(
        self, request: dict[str, Any], timeout: float = 30.0, *, version: int = PROTOCOL_VERSION
    ) -> dict[str, Any]:
        """One blocking RPC as raw frames, after the hello (for test set-up and
        checks; the brain uses ``HostClient``). A refused hello is the reply."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(self.socket_path))
            hello = _exchange(sock, {"op": "hello", "version": version})
            if "error" in hello:
                return hello
            return _exchange(sock, request)

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the host's sandboxes die with it (``--die-with-parent``)."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
            self._process.wait(timeout=30)
        self._close_log()

    def stop(self) -> None:
        """SIGTERM, then removes the work directory (workspaces and packages)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=15)
        self._close_log()
        # A host killed before (``kill``) left its awake sandboxes' disks mounted.
        unmount_under(self.work_dir)
        shutil.rmtree(self.work_dir, ignore_errors=True)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def mounts_under(directory: Path) -> list[Path]:
    """The mount points below ``directory`` (a sandbox host's disks), deepest first."""
    prefix = str(directory).rstrip("/") + "/"
    with open("/proc/self/mountinfo", encoding="utf-8") as table:
        points = [line.split(" ", 5)[4].replace("\\040", " ") for line in table]
    found = [Path(p) for p in points if p.startswith(prefix)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_under(directory: Path) -> None:
    for point in mounts_under(directory):
        subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30, check=False)


def _exchange(sock: socket.socket, frame: dict[str, Any]) -> dict[str, Any]:
    data = json.dumps(frame).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)
    header = _exactly(sock, 4)
    reply: dict[str, Any] = json.loads(_exactly(sock, struct.unpack(">I", header)[0]))
    return reply


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the sandbox host closed the connection")
        data += chunk
    return data
