"""The supervisor: the first process inside a sandbox, the host's hands there.

Runs as ``python3 -I -S /run/stead/lib/init.py CONTROL_FD`` under bubblewrap,
as the sandbox's own unprivileged user, with the standard library only. The
host daemon talks to it over a SOCK_SEQPACKET socket (one JSON message per
packet). It starts processes on request and hands their pipe or PTY fds back
to the host with SCM_RIGHTS, so the host reads and writes a sandboxed
command's streams directly, as it would a local child's; it sends the host
signals on request and reports each child's exit. It also starts the egress
forwarder (127.0.0.1:3128 -> the proxy's Unix socket) when that socket exists.

Requests: ``{"op": "spawn", "id", "argv", "env", "cwd", "pty": null | {"rows",
"cols"}, "stderr": "stdout" | "pipe" | "null"}`` -> ``{"id", "pid"}`` plus fds
(stdin, stdout[, stderr]; or the PTY master); ``{"op": "signal", "id", "pid",
"signal"}`` signals the process group; ``{"op": "ping", "id"}``.
Events: ``{"event": "ready"}`` once, ``{"event": "exit", "pid", "code"}`` per
child (``code`` negative for a signal, as in subprocess). Errors: ``{"id",
"error"}``. When the host's end closes, every child group is killed and the
supervisor exits; bubblewrap then tears the sandbox down.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
from typing import Any

EGRESS_SOCKET = "/run/stead/egress/proxy.sock"
PROXY_PORT = 3128
MAX_MESSAGE = 1 << 20


class Supervisor:
    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.children: dict[int, subprocess.Popen[bytes]] = {}

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        data = json.dumps(message).encode()
        ancillary = []
        if fds:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        self.control.sendmsg([data], ancillary)

    def handle(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        ident = message.get("id")
        try:
            if op == "spawn":
                self.spawn(message)
            elif op == "signal":
                os.killpg(int(message["pid"]), int(message["signal"]))
                self.send({"id": ident})
            elif op == "ping":
                self.send({"id": ident})
            else:
                self.send({"id": ident, "error": f"unknown op {op!r}"})
        except ProcessLookupError:
            self.send({"id": ident})  # already gone: the signal's purpose is met
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.send({"id": ident, "error": str(exc)})

    def spawn(self, message: dict[str, Any]) -> None:
        argv = [str(a) for a in message["argv"]]
        env = {str(k): str(v) for k, v in dict(message.get("env") or {}).items()}
        cwd = str(message.get("cwd") or "/workspace")
        pty_size = message.get("pty")
        preexec = None
        if pty_size:
            master, slave = os.openpty()
            _set_size(master, int(pty_size.get("rows", 24)), int(pty_size.get("cols", 80)))
            stdio = (slave, slave, slave)
            host_side, child_side = [master], [slave]
            preexec = _take_terminal
        else:
            in_read, in_write = os.pipe()
            out_read, out_write = os.pipe()
            host_side, child_side = [in_write, out_read], [in_read, out_write]
            stderr: int = out_write
            if message.get("stderr") == "pipe":
                err_read, stderr = os.pipe()
                host_side.append(err_read)
                child_side.append(stderr)
            elif message.get("stderr") == "null":
                stderr = subprocess.DEVNULL
            stdio = (in_read, out_write, stderr)
        try:
            try:
                child = subprocess.Popen(
                    argv,
                    stdin=stdio[0],
                    stdout=stdio[1],
                    stderr=stdio[2],
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                    preexec_fn=preexec,
                )
            finally:
                for fd in child_side:
                    _close_quietly(fd)
            self.children[child.pid] = child
            self.send({"id": message.get("id"), "pid": child.pid}, host_side)
        finally:
            for fd in host_side:
                _close_quietly(fd)

    def reap(self) -> None:
        for pid, child in list(self.children.items()):
            code = child.poll()
            if code is not None:
                del self.children[pid]
                self.send({"event": "exit", "pid": pid, "code": code})

    def shutdown(self) -> None:
        for pid in list(self.children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def _take_terminal() -> None:
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _start_forwarder() -> None:
    if not os.path.exists(EGRESS_SOCKET):
        return
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        from forward import start_forwarder  # type: ignore[import-not-found]

        start_forwarder("127.0.0.1", PROXY_PORT, EGRESS_SOCKET)
    except Exception as exc:  # no network is a degraded sandbox, not a dead one
        print(f"stead: egress forwarder did not start: {exc}", file=sys.stderr)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    control.setblocking(False)
    supervisor = Supervisor(control)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _start_forwarder()
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ, "control")
    selector.register(wake_read, selectors.EVENT_READ, "signal")
    supervisor.send({"event": "ready"})
    while True:
        for key, _ in selector.select():
            if key.data == "signal":
                try:
                    os.read(wake_read, 4096)
                except BlockingIOError:
                    pass
                supervisor.reap()
                continue
            try:
                data = control.recv(MAX_MESSAGE)
            except BlockingIOError:
                continue
            if not data:
                supervisor.shutdown()
                return
            try:
                message = json.loads(data)
            except ValueError:
                continue
            if isinstance(message, dict):
                supervisor.handle(message)
        supervisor.reap()


if __name__ == "__main__":
    main()
