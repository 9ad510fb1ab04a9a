"""The supervisor: the first process inside a sandbox, the host's hands there.

Runs under bubblewrap as ``python3 -I -S -c "...import init; init.main()"
CONTROL_FD`` (imported, not run as a script, so the bytecode the host compiled
is used; ``bwrap.BOOT``), as the sandbox's own unprivileged user, with the
standard library only. The host daemon talks to it over a SOCK_SEQPACKET
socket, one message per packet: the host's requests are ``marshal``-encoded
dicts (the host is trusted, and ``marshal`` is built in), the supervisor's
replies and events are JSON (the host parses what comes out of a sandbox
strictly). It starts processes on request and hands their pipe or PTY fds back
to the host with SCM_RIGHTS, so the host reads and writes a sandboxed command's
streams directly, as it would a local child's; it sends the host signals on
request and reports each child's exit. It also starts the egress forwarder
(127.0.0.1:3128 -> the proxy's Unix socket) when that socket exists.

Requests: ``{"op": "spawn", "id", "argv", "env", "cwd", "pty": None | {"rows",
"cols"}, "stderr": "stdout" | "pipe" | "null"}`` -> ``{"id", "pid"}`` plus fds
(stdin, stdout[, stderr]; or the PTY master); ``{"op": "signal", "id", "pid",
"signal"}`` signals the process group; ``{"op": "ping", "id"}``.
Events: ``{"event": "ready"}`` once, ``{"event": "exit", "pid", "code"}`` per
child (``code`` negative for a signal, as in subprocess). Errors: ``{"id",
"error"}``. When the host's end closes, every child group is killed and the
supervisor exits; bubblewrap then tears the sandbox down.

Every sandbox start waits for this process to say ready, so it imports only
modules built into the interpreter: ``json``, ``subprocess``, ``socket``,
``signal`` and ``selectors`` would cost that start ~15 ms of imports. Hence
the small JSON encoder, and ``os.posix_spawn`` (a vfork, cheaper than
subprocess's fork for the common pipe case too) set up to do what
subprocess.Popen with ``start_new_session=True`` did: children get fds 0-2
only, default SIGPIPE and SIGXFSZ, and the env's PATH. One difference: glibc's
posix_spawn leaves its two internal signals (32, 33) ignored in the child,
which glibc programs reset when they first need them.
"""

from __future__ import annotations

import _socket
import errno
import marshal
import os
import select
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from typing import Any
else:
    import _signal  # the same functions as signal's, without its enums

EGRESS_SOCKET = "/run/stead/egress/proxy.sock"
PROXY_PORT = 3128
MAX_MESSAGE = 1 << 20
JSON_ESCAPES = {code: f"\\u{code:04x}" for code in range(0x20)} | {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
}


class Supervisor:
    def __init__(self, control: _socket.socket) -> None:
        self.control = control
        self.children: set[int] = set()
        self.home = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        """Where relative ``cwd``s start from (/workspace): ``_start`` returns here."""

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        # surrogatepass: a lone surrogate (an undecodable file name in an error)
        # round-trips, since json.loads decodes bytes the same way.
        data = _json(message).encode("utf-8", "surrogatepass")
        ancillary = []
        if fds:
            rights = b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)
            ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)]
        self.control.sendmsg([data], ancillary)

    def handle(self, message: dict[str, Any]) -> None:
        op = message.get("op")
        ident = message.get("id")
        if not isinstance(ident, int | str):
            ident = None
        try:
            if op == "spawn":
                self.spawn(message, ident)
            elif op == "signal":
                os.killpg(int(message["pid"]), int(message["signal"]))
                self.send({"id": ident})
            elif op == "ping":
                self.send({"id": ident})
            else:
                self.send({"id": ident, "error": f"unknown op {op!r}"})
        except ProcessLookupError:
            self.send({"id": ident})  # already gone: the signal's purpose is met
        except (OSError, ValueError, KeyError, TypeError, OverflowError) as exc:
            self.send({"id": ident, "error": str(exc)})

    def spawn(self, message: dict[str, Any], ident: int | str | None) -> None:
        argv = [str(a) for a in message["argv"]]
        env = {str(k): str(v) for k, v in dict(message.get("env") or {}).items()}
        cwd = str(message.get("cwd") or "/workspace")
        pty_size = message.get("pty")
        actions: list[tuple[Any, ...]]
        if pty_size:
            import fcntl
            import termios  # only terminals need them: not loaded on every start

            master, slave = os.openpty()
            host_side, child_side = [master], [slave]
            try:
                size = (int(pty_size.get("rows", 24)), int(pty_size.get("cols", 80)), 0, 0)
                winsize = b"".join(value.to_bytes(2, sys.byteorder) for value in size)
                fcntl.ioctl(master, termios.TIOCSWINSZ, winsize)
                # Opened by name (without O_NOCTTY) in the child's new session,
                # the terminal becomes its controlling one, as TIOCSCTTY would make it.
                actions = [(os.POSIX_SPAWN_OPEN, 0, os.ttyname(slave), os.O_RDWR, 0)]
                actions += [(os.POSIX_SPAWN_DUP2, 0, 1), (os.POSIX_SPAWN_DUP2, 0, 2)]
            except BaseException:
                for fd in (master, slave):
                    _close_quietly(fd)
                raise
        else:
            in_read, in_write = os.pipe()
            out_read, out_write = os.pipe()
            host_side, child_side = [in_write, out_read], [in_read, out_write]
            actions = [(os.POSIX_SPAWN_DUP2, in_read, 0), (os.POSIX_SPAWN_DUP2, out_write, 1)]
            if message.get("stderr") == "pipe":
                err_read, err_write = os.pipe()
                host_side.append(err_read)
                child_side.append(err_write)
                actions.append((os.POSIX_SPAWN_DUP2, err_write, 2))
            elif message.get("stderr") == "null":
                actions.append((os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_RDWR, 0))
            else:
                actions.append((os.POSIX_SPAWN_DUP2, out_write, 2))
        try:
            try:
                pid = _start(argv, env, cwd, actions, self.home)
            finally:
                for fd in child_side:
                    _close_quietly(fd)
            self.children.add(pid)
            self.send({"id": ident, "pid": pid}, host_side)
        finally:
            for fd in host_side:
                _close_quietly(fd)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if not pid:
                return
            if pid in self.children:
                self.children.discard(pid)
                code = os.waitstatus_to_exitcode(status)
                self.send({"event": "exit", "pid": pid, "code": code})

    def shutdown(self) -> None:
        for pid in self.children:
            try:
                os.killpg(pid, _signal.SIGKILL)
            except OSError:
                pass


def _start(
    argv: list[str], env: dict[str, str], cwd: str, actions: list[tuple[Any, ...]], home: int
) -> int:
    """Starts ``argv`` in ``cwd`` with ``env``, in a session of its own, its fds 0-2
    set up by ``actions`` (and no others: every fd here is close-on-exec); returns
    its pid or raises what its chdir or exec failed with. Leaves this process in
    ``home``."""
    if not argv:
        raise ValueError("no program to run")
    program = argv[0]
    if os.path.dirname(program):
        candidates = [program]
    else:
        # The child's PATH, not ours, as subprocess does when given env.
        search = env.get("PATH", os.defpath).split(os.pathsep)
        candidates = [os.path.join(place, program) for place in search]
    # posix_spawn has no chdir; only this thread starts processes, and the
    # forwarder's threads use no relative paths, so a moment elsewhere is safe.
    os.chdir(cwd)
    try:
        first = 0
        for path in candidates:
            try:
                os.stat(path)  # a miss costs a stat here, not a clone() that fails
                return os.posix_spawn(
                    path,
                    argv,
                    env,
                    file_actions=actions,
                    setsid=True,
                    setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ),  # Python ignores them
                )
            except OSError as exc:
                # Like execvp: report the first error other than "not here".
                if not first and exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                    first = exc.errno or 0
        code = first or errno.ENOENT
        raise OSError(code, os.strerror(code), program)
    finally:
        os.fchdir(home)


def _json(value: object) -> str:
    """JSON for what the supervisor sends: dicts, lists, str, int, bool, None."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, str):
        return '"' + value.translate(JSON_ESCAPES) + '"'
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"JSON keys must be str, not {type(key).__name__}")
            items.append(_json(key) + ":" + _json(item))
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_json(item) for item in value) + "]"
    raise TypeError(f"{type(value).__name__} is not sent as JSON")


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _start_forwarder() -> None:
    if not os.path.exists(EGRESS_SOCKET):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    sys.dont_write_bytecode = True  # the lib mount is read-only: no attempt to cache
    try:
        from forward import start_forwarder  # type: ignore[import-not-found]

        start_forwarder("127.0.0.1", PROXY_PORT, EGRESS_SOCKET)
    except Exception as exc:  # no network is a degraded sandbox, not a dead one
        print(f"stead: egress forwarder did not start: {exc}", file=sys.stderr)


def main() -> None:
    # posix_spawn passes on every fd not marked close-on-exec: mark what bwrap
    # handed down (the control socket among them) so children get only 0-2.
    for name in os.listdir("/proc/self/fd"):
        if int(name) > 2:
            try:
                os.set_inheritable(int(name), False)
            except OSError:
                pass  # the listing's own fd, closed by now
    control_fd = int(sys.argv[1])
    control = _socket.socket(fileno=control_fd)
    control.setblocking(False)
    supervisor = Supervisor(control)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    _signal.set_wakeup_fd(wake_write)
    _signal.signal(_signal.SIGCHLD, lambda *_: None)
    _start_forwarder()
    poller = select.poll()
    poller.register(control_fd, select.POLLIN)
    poller.register(wake_read, select.POLLIN)
    supervisor.send({"event": "ready"})
    while True:
        for fd, _ in poller.poll():
            if fd == wake_read:
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
                message = marshal.loads(data)
            except (ValueError, EOFError, TypeError):
                continue
            if isinstance(message, dict):
                supervisor.handle(message)
        supervisor.reap()


if __name__ == "__main__":
    main()
