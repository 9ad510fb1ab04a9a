"""``stead serve`` processes (and other ``stead`` commands, ``ServeForker.run``)
forked from one that has already imported stead.

Importing the API (the SDK's types, FastAPI, SQLAlchemy, Alembic) is most of a
server's start: seconds of CPU on a busy machine. A test that starts dozens of
servers (the crash test kills one at each of 30 points and restarts it) spends
its time there. ``ServeForker`` runs one helper process that imports stead
once and forks each server from itself. A forked server is still a process of
its own, running ``stead serve``'s own entry point on its own data directory,
port and environment, and it dies to a real SIGKILL; only the imports are
shared. The helper holds no threads, sockets or database connections when it
forks, so a child starts as clean as a fresh interpreter would.

The helper keeps every child it forked as a zombie until the test reaps it, so
a pid cannot be reused while the test may still signal or watch it; when the
test closes the pipe (or dies) the helper kills and reaps what is left.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import IO, Any, NoReturn

PRELOAD = (
    "stead.cli",
    "stead.api",
    "stead.harness.providers.anthropic",
    "stead.sandbox.providers.host",
    "stead.sandbox.providers.unsafe_local",
    "sqlite3",
    "anyio._backends._asyncio",
    "typer._click.decorators",
    "uvicorn",
    "uvicorn.lifespan.on",
    "uvicorn.loops.uvloop",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
    "stead.tools.mcp",
    "stead.sandbox_host.server",
    "stead.sandbox_host.settings",
)
"""What ``stead serve`` imports before it answers and on its first turn (the mcp
SDK, which a server loads only at its first MCP call, costs each forked server
about a second there otherwise: crash tests fork one per kill point), and what
``stead sandbox-host`` imports."""
PRELOAD_FOR = MappingProxyType({"worker": ("stead.client.worker",)})
"""Imported by the helper before it forks the first of such a command: ``stead
worker`` runs on the anthropic SDK (a second and a half of imports), which a
helper that forks no worker need not load."""


class ServeForker:
    """The helper process; use as a context manager (one per test session is plenty)."""

    def __init__(self) -> None:
        self._helper: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> ServeForker:
        self._helper = subprocess.Popen(
            [sys.executable, "-c", "from stead.testing.forker import helper; helper()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._request({"op": "ready"})
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        helper, self._helper = self._helper, None
        if helper is None:
            return
        assert helper.stdin is not None and helper.stdout is not None
        helper.stdin.close()  # the helper kills and reaps its children, then exits
        try:
            helper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait(timeout=30)
        helper.stdout.close()

    def fork(
        self,
        env: dict[str, str],
        log_path: Path,
        command: tuple[str, ...] = ("serve",),
        stderr_path: Path | None = None,
    ) -> ForkedServer:
        """Starts ``stead <command>`` (``serve`` unless named) with exactly ``env``,
        its output appended to ``log_path`` (its errors too, unless ``stderr_path``)."""
        request = {
            "op": "fork",
            "env": env,
            "log": str(log_path),
            "errors": str(stderr_path or log_path),
            "command": list(command),
        }
        pid = int(self._request(request)["pid"])
        return ForkedServer(self, pid, command)

    def complete(
        self, command: tuple[str, ...], env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``stead <command>`` run to its end, as ``subprocess.run`` with
        ``capture_output`` and ``text`` would give it (a CLI test's operator
        command, without a fresh interpreter's seconds of imports)."""
        with tempfile.TemporaryDirectory(prefix="stead-forked-") as scratch:
            out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
            child = self.fork(env, out, command, stderr_path=err)
            try:
                code = child.wait(timeout)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(30)
                raise
            texts = [p.read_text(errors="replace") if p.exists() else "" for p in (out, err)]
        return subprocess.CompletedProcess(["stead", *command], code, texts[0], texts[1])

    def run(self, command: tuple[str, ...], env: dict[str, str], timeout: float) -> str:
        """The output of ``stead <command>`` run to its end (its errors after it);
        ``RuntimeError`` with both if it fails."""
        done = self.complete(command, env, timeout)
        text = done.stdout + done.stderr
        if done.returncode != 0:
            raise RuntimeError(f"stead {' '.join(command)} exited with {done.returncode}: {text}")
        return text

    def reap(self, pid: int) -> int:
        """The exit code of a child that has ended (negative: killed by that signal)."""
        return int(self._request({"op": "reap", "pid": pid})["code"])

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        # Lanes of one test share the helper from several threads.
        with self._lock:
            helper = self._helper
            if helper is None or helper.stdin is None or helper.stdout is None:
                raise RuntimeError("the forker is not running")
            helper.stdin.write(json.dumps(request).encode() + b"\n")
            helper.stdin.flush()
            line = helper.stdout.readline()
        if not line:
            raise RuntimeError(f"the forker died (exit {helper.wait(timeout=30)})")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"the forker failed: {reply['error']}")
        return reply


def launch(
    command: tuple[str, ...], env: dict[str, str], log_path: Path, forker: ServeForker | None
) -> tuple[subprocess.Popen[bytes] | ForkedServer, IO[bytes] | None]:
    """``stead <command>`` with exactly ``env`` and its output appended to
    ``log_path``: forked from ``forker``, else in a fresh interpreter. Also the
    log file the caller closes once the process ended (None when forked)."""
    if forker is not None:
        return forker.fork(env, log_path, command), None
    log = log_path.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "stead", *command],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    return process, log


class ForkedServer:
    """The part of ``subprocess.Popen`` that ``ServerProcess`` and ``HostProcess``
    use, for a forked child.

    The child is the helper's, not ours, so it is watched and signalled through a
    pidfd, which stays bound to this process even after it ends.
    """

    def __init__(self, forker: ServeForker, pid: int, command: tuple[str, ...]) -> None:
        self._forker = forker
        self.pid = pid
        self._command = command
        self.returncode: int | None = None
        # Safe from pid reuse: the helper does not reap the child until asked.
        self._pidfd: int | None = os.pidfd_open(pid)

    def poll(self) -> int | None:
        return self._ended(0.0)

    def wait(self, timeout: float) -> int:
        code = self._ended(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(["stead", *self._command], timeout)
        return code

    def send_signal(self, sig: int) -> None:
        if self._pidfd is not None:
            signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _ended(self, timeout: float) -> int | None:
        if self._pidfd is None:
            return self.returncode
        readable, _, _ = select.select([self._pidfd], [], [], timeout)
        if not readable:
            return None
        os.close(self._pidfd)
        self._pidfd = None
        self.returncode = self._forker.reap(self.pid)
        return self.returncode


def _serve_child(env: dict[str, str], log: str, errors: str, command: list[str]) -> NoReturn:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        err = os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # Replacing 0 and 1 also drops the child's copies of the helper's pipes.
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {null, out, err}:
            os.close(fd)
        gc.enable()
        os.environ.clear()
        os.environ.update(env)
        sys.argv = ["stead", *command]
        from stead.cli import main

        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def helper() -> None:
    """The helper's loop: one JSON request per line on stdin, one reply per line on stdout."""
    # As the gc module's documentation advises for fork without exec: without
    # this, each child's first full collections walk (and so copy) the whole
    # imported heap, which costs it about as much as the imports saved.
    gc.disable()
    from stead.cli_support import without_pydantic_v1

    without_pydantic_v1()  # as ``stead serve`` does before its imports
    for name in PRELOAD:
        importlib.import_module(name)
    gc.freeze()
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    children: set[int] = set()
    try:
        for line in requests:
            request = json.loads(line)
            try:
                reply = _handle(request, children)
            except Exception as exc:  # reported to the test, which raises it
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            replies.write(json.dumps(reply).encode() + b"\n")
            replies.flush()
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)  # an ended child is a zombie until reaped: no error
            os.waitpid(pid, 0)


def _handle(request: dict[str, Any], children: set[int]) -> dict[str, Any]:
    if request["op"] == "fork":
        wanted = [n for n in PRELOAD_FOR.get(request["command"][0], ()) if n not in sys.modules]
        if wanted:
            for name in wanted:
                importlib.import_module(name)
            gc.freeze()  # as after PRELOAD
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _serve_child(request["env"], request["log"], request["errors"], request["command"])
        children.add(pid)
        return {"pid": pid}
    if request["op"] == "reap":
        pid = int(request["pid"])
        _, status = os.waitpid(pid, 0)
        children.discard(pid)
        return {"code": os.waitstatus_to_exitcode(status)}
    return {}
