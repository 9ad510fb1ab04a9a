"""``bwrap``: a sandbox body under bubblewrap, one per active sandbox (rule 7).

The body is one ``bwrap`` process running the supervisor (``inside/init.py``)
as the sandbox's own unprivileged host uid, in new user, pid, mount, ipc, uts
and net namespaces, inside the sandbox's cgroup. System directories are
read-only, ``/workspace`` and ``/tmp`` are directories on the sandbox's disk
(``disk.py``; the only places it can write to, with its writable mounts), and
the only way out of the empty network namespace is the egress proxy's Unix
socket under ``/run/stead/egress``.

Start-up order matters: a launcher shell, still root, moves itself into the
sandbox's cgroup; only then does it drop to the sandbox uid and exec
bubblewrap, so every sandbox process is born limited. Paths reach bubblewrap as
open fds (``--bind-fd``), so the sandbox uid needs no search
permission on the host's state directory.

Every process the host starts inside goes through the supervisor, which hands
back its pipe or PTY fds (``supervisor_channel.py``); ``SandboxedProcess``
reads and writes them here.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from anyio import to_thread
from anyio.abc import Process

from stead.sandbox import WORKSPACE, SandboxUnavailable
from stead.sandbox_host.egress import BUNDLE, SANDBOX_CA_DIR, system_bundles
from stead.sandbox_host.supervisor_channel import MAX_FDS, FdStream, SupervisorChannel, first_of

if TYPE_CHECKING:
    from stead.sandbox_host.cgroups import SandboxCgroup

log = logging.getLogger(__name__)

INSIDE = Path(__file__).resolve().parent / "inside"
SANDBOX_UID = 1000
"""The uid (and gid) the sandbox's processes see themselves as."""
START_SECONDS = 10.0
STOP_SECONDS = 5.0
STDERR_LOG_BYTES = 16 * 1024
COMPILE_SECONDS = 30.0
SANDBOX_PYTHON = "/usr/bin/python3"
"""The interpreter the supervisor runs on: the system's, seen read-only inside."""
BOOT = "import sys; sys.path.insert(0, '/run/stead/lib'); import init; init.main()"
"""Imports the supervisor, so its precompiled bytecode is used (``install_supervisor``)."""
"""Read by every Python 3 the sandbox may have, whatever the host's default."""
LAUNCHER = (
    '[ "$1" = - ] || ulimit -S -n "$1" || exit 125; shift;'
    ' n=$1; shift; while [ "$n" -gt 0 ]; do'
    ' echo 0 >"$1" || { echo "cannot join the sandbox cgroup at $1" >&2; exit 125; };'
    ' shift; n=$((n - 1)); done; exec "$@"'
)
"""Runs ``LIMIT N FILE... COMMAND...``: sets its soft limit on open files to
LIMIT (``-``: keeps the host's), moves itself into the cgroup through each of
the N files, then execs the command; exits 125 without running it otherwise."""


@dataclass(frozen=True, slots=True)
class BodySpec:
    uid: int
    """The host uid (and gid) the sandbox runs as; owns the workspace."""
    workspace: Path
    tmp_dir: Path | None = None
    """Host directory bound at /tmp; None: a tmpfs (the package installer's)."""
    egress_dir: Path | None = None
    """Host directory holding the egress proxy's ``proxy.sock``; None: no network."""
    mounts_dir: Path | None = None
    """Host directory of the sandbox's mount tree (``mounts.py``), at /mnt."""
    skills: bool = False
    """Also bind the tree's ``skills`` at /workspace/skills (the agent has skills)."""
    packages_dir: Path | None = None
    """Host directory of the environment's installed packages, at /opt/stead."""
    packages_writable: bool = False
    """Only while the packages are being installed, never for an agent's body."""
    hostname: str = "sandbox"
    bwrap: str = "bwrap"
    lib_dir: Path = INSIDE
    """The supervisor's code, mounted read-only at /run/stead/lib; the host
    copies ``inside/`` where every sandbox uid can reach it."""
    ca_dir: Path | None = None
    """Host directory holding the CA bundle the sandbox trusts (``egress.trust``):
    mounted read-only at /run/stead/ca, its bundle over the system bundles.
    None: the sandbox trusts the system's CAs only (its TLS is not terminated)."""
    open_files: int | None = None
    """The soft limit on open files of the sandbox's processes
    (``HostOptions.sandbox_open_files``); None: the host's own."""


def bwrap_argv(spec: BodySpec, fds: Mapping[str, int], control_fd: int) -> list[str]:
    argv = [
        spec.bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID),
        "--hostname", spec.hostname,
        "--ro-bind", "/usr", "/usr",
        "--ro-bind", "/etc", "/etc",
        "--proc", "/proc",
        "--dev", "/dev",
        *(["--bind-fd", str(fds["tmp"]), "/tmp"] if "tmp" in fds else ["--tmpfs", "/tmp"]),
        "--dir", "/var",
        "--symlink", "../tmp", "/var/tmp",
        "--dir", "/home",
        "--bind-fd", str(fds["workspace"]), WORKSPACE,
        "--ro-bind-fd", str(fds["lib"]), "/run/stead/lib",
    ]  # fmt: skip
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        target = os.readlink(f"/{name}") if os.path.islink(f"/{name}") else None
        if target is not None:
            argv += ["--symlink", target, f"/{name}"]
        elif os.path.isdir(f"/{name}"):
            argv += ["--ro-bind", f"/{name}", f"/{name}"]
    if "egress" in fds:
        argv += ["--bind-fd", str(fds["egress"]), "/run/stead/egress"]
    if "mounts" in fds:
        # Writable as a mount; what the sandbox user may change is set by each
        # file's owner and mode there.
        argv += ["--bind-fd", str(fds["mounts"]), "/mnt"]
    if "skills" in fds:
        # After /workspace: the skills show inside it, read-only, never in its snapshots.
        argv += ["--ro-bind-fd", str(fds["skills"]), f"{WORKSPACE}/skills"]
    if "packages" in fds:
        mount = "--bind-fd" if spec.packages_writable else "--ro-bind-fd"
        argv += [mount, str(fds["packages"]), "/opt/stead"]
    if "ca" in fds:
        argv += ["--ro-bind-fd", str(fds["ca"]), SANDBOX_CA_DIR]
        for path in system_bundles():
            argv += ["--ro-bind-fd", str(fds["ca_bundle"]), path]
    # Last: the root bwrap built (a tmpfs) becomes read-only; /workspace, /tmp,
    # /mnt and the egress socket's directory are mounts of their own and stay writable.
    argv += ["--remount-ro", "/"]
    argv += ["--chdir", WORKSPACE, "--clearenv", "--setenv", "PATH", "/usr/bin:/bin"]
    argv += [SANDBOX_PYTHON, "-I", "-S", "-c", BOOT, str(control_fd)]
    return argv


def install_supervisor(lib: Path) -> None:
    """Puts the supervisor's code in ``lib`` (which must exist), readable by every
    sandbox uid, with bytecode compiled by the sandbox's own interpreter.

    A script run by path is compiled on every start, and the sandbox cannot
    write a cache into its read-only lib; imported with its bytecode in place,
    the supervisor starts some 5 ms sooner. If compiling fails the sources still
    work, only slower, so that is logged, not raised.
    """
    for source in INSIDE.glob("*.py"):
        shutil.copyfile(source, lib / source.name)
        os.chmod(lib / source.name, 0o644)
    os.chmod(lib, 0o755)
    compile_ = [SANDBOX_PYTHON, "-I", "-S", "-m", "compileall", "-q", "-l", str(lib)]
    try:
        done = subprocess.run(compile_, capture_output=True, timeout=COMPILE_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("sandbox supervisor not precompiled: %s", exc)
        return
    if done.returncode != 0:
        log.warning("sandbox supervisor not precompiled: %s", done.stdout + done.stderr)
        return
    cache = lib / "__pycache__"
    os.chmod(cache, 0o755)
    for compiled in cache.iterdir():
        os.chmod(compiled, 0o644)


class SandboxedProcess:
    """A process inside a sandbox, started by its supervisor. ``pid`` is the
    process's pid inside the sandbox; it leads its own process group there."""

    def __init__(self, body: BwrapBody, pid: int, fds: list[int], *, pty: bool) -> None:
        self._body = body
        self.pid = pid
        self.pty = pty
        streams = [FdStream(fd) for fd in fds]
        self.stdin: FdStream | None = streams[0] if streams else None
        self.stdout: FdStream | None = (
            streams[0] if pty else (streams[1] if len(streams) > 1 else None)
        )
        self.stderr: FdStream | None = streams[2] if len(streams) > 2 else None
        self._streams = streams

    @property
    def returncode(self) -> int | None:
        code = self._body.channel.exit_code(self.pid)
        if code is None and self._body.channel.closed.is_set():
            return -signal.SIGKILL
        return code

    async def send(self, data: bytes) -> None:
        assert self.stdin is not None
        await self.stdin.send(data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        assert self.stdout is not None
        return await self.stdout.receive(max_bytes)

    async def wait(self) -> int | None:
        return await self._body.channel.wait_exit(self.pid)

    def on_exit(self, callback: Callable[[], None]) -> None:
        self._body.channel.on_exit(self.pid, callback)

    async def signal(self, signum: int) -> None:
        await self._body.signal(self.pid, signum)

    async def kill(self) -> None:
        """SIGKILLs the process group, its fds left open; never raises."""
        with contextlib.suppress(SandboxUnavailable):
            await self._body.signal(self.pid, signal.SIGKILL)

    async def dispose(self) -> None:
        """SIGKILLs the process group, closes the fds, waits for the exit
        report; never raises, finishes even under cancellation."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_SECONDS):
            with contextlib.suppress(SandboxUnavailable):
                await self._body.signal(self.pid, signal.SIGKILL)
            self.close_streams()
            await self.wait()
        self.close_streams()

    def close_streams(self) -> None:
        for stream in self._streams:
            stream.close()


class BwrapBody:
    """A running sandbox: the bwrap process and the channel to its supervisor."""

    def __init__(self, process: Process, channel: SupervisorChannel, cgroup: SandboxCgroup) -> None:
        self.process = process
        self.channel = channel
        self.cgroup = cgroup

    @property
    def alive(self) -> bool:
        return self.process.returncode is None and not self.channel.closed.is_set()

    async def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: str = WORKSPACE,
        pty: tuple[int, int] | None = None,
        stderr: str = "stdout",
    ) -> SandboxedProcess:
        message: dict[str, Any] = {
            "op": "spawn",
            "argv": list(argv),
            "env": dict(env),
            "cwd": cwd,
            "stderr": stderr,
            "pty": {"rows": pty[0], "cols": pty[1]} if pty else None,
        }
        reply, fds = await self.channel.request(message)
        pid = reply.get("pid")
        if not isinstance(pid, int) or len(fds) > MAX_FDS:
            for fd in fds:
                os.close(fd)
            raise SandboxUnavailable("the sandbox gave a malformed answer")
        return SandboxedProcess(self, pid, fds, pty=pty is not None)

    async def signal(self, pid: int, signum: int) -> None:
        await self.channel.request({"op": "signal", "pid": pid, "signal": signum})


@contextlib.asynccontextmanager
async def run_body(spec: BodySpec, cgroup: SandboxCgroup) -> AsyncIterator[BwrapBody]:
    """Starts the sandbox and yields it; on exit (or failure) every process in
    it is killed and the bwrap process reaped."""
    host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    host_end.setblocking(False)
    opened = _open_paths(spec)
    process: Process | None = None
    try:
        fds = dict(opened)
        passed = [*fds.values(), sandbox_end.fileno()]
        argv = bwrap_argv(spec, fds, sandbox_end.fileno())
        # uvloop's spawn cannot change users, so the launcher drops to the
        # sandbox uid itself, with setpriv (util-linux), once it is in the cgroup.
        limit = "-" if spec.open_files is None else str(spec.open_files)
        launcher = ["/bin/sh", "-c", LAUNCHER, "stead-sandbox", limit, *_cgroup_joins(cgroup)]
        launcher += ["setpriv", f"--reuid={spec.uid}", f"--regid={spec.uid}", "--clear-groups"]
        process = await anyio.open_process(
            launcher + argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={},
            pass_fds=passed,
            start_new_session=True,
        )
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        sandbox_end.close()
        host_end.close()
        if process is not None:
            await _reap(process, cgroup)
        raise
    for fd in opened.values():
        os.close(fd)
    sandbox_end.close()
    channel = SupervisorChannel(host_end)
    body = BwrapBody(process, channel, cgroup)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(channel.read_forever)
            await _await_ready(process, channel)
            tasks.start_soon(_drain_stderr, process)
            try:
                yield body
            finally:
                tasks.cancel_scope.cancel()
    finally:
        host_end.close()
        await _reap(process, cgroup)


def _cgroup_joins(cgroup: SandboxCgroup) -> list[str]:
    """The launcher's arguments that move it into ``cgroup``.

    Writing 0 makes the writer join. On cgroup v1 it writes to ``tasks``, which
    moves one thread (the shell has no other), so the kernel skips its global
    threadgroup lock; moving a process by pid (``cgroup.procs``, as
    ``SandboxCgroup.add`` does) takes that lock and waits out an RCU grace
    period, some 5-15 ms of every sandbox start. v2 has only ``cgroup.procs``.
    """
    name = "tasks" if cgroup.version == 1 else "cgroup.procs"
    files = [str(directory / name) for directory in cgroup.hierarchies]
    return [str(len(files)), *files]


async def _await_ready(process: Process, channel: SupervisorChannel) -> None:
    with anyio.move_on_after(START_SECONDS):
        await first_of(channel.ready.wait, channel.closed.wait)
    if channel.ready.is_set():
        return
    detail = ""
    if process.stderr is not None:
        with anyio.move_on_after(1.0), contextlib.suppress(anyio.EndOfStream, OSError):
            detail = (await process.stderr.receive(4096)).decode(errors="replace").strip()
    raise SandboxUnavailable(f"the sandbox did not start: {detail or 'no answer'}")


async def _drain_stderr(process: Process) -> None:
    """Logs what bubblewrap and the supervisor write to stderr after the start,
    up to ``STDERR_LOG_BYTES``, and discards the rest: a full pipe would block
    the supervisor, and the sandbox must not be able to flood the host's log."""
    if process.stderr is None:
        return
    logged = 0
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
        while True:
            data = await process.stderr.receive(4096)
            if logged < STDERR_LOG_BYTES:
                text = data[: STDERR_LOG_BYTES - logged].decode(errors="replace").rstrip()
                log.warning("sandbox body %d stderr: %s", process.pid, text)
                logged += len(data)


async def _reap(process: Process, cgroup: SandboxCgroup) -> None:
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await to_thread.run_sync(cgroup.kill_all)
        with anyio.move_on_after(STOP_SECONDS):
            await process.aclose()


def _open_paths(spec: BodySpec) -> dict[str, int]:
    paths = {"workspace": spec.workspace, "lib": spec.lib_dir}
    if spec.tmp_dir is not None:
        paths["tmp"] = spec.tmp_dir
    if spec.egress_dir is not None:
        paths["egress"] = spec.egress_dir
    if spec.mounts_dir is not None:
        paths["mounts"] = spec.mounts_dir
        if spec.skills:
            paths["skills"] = spec.mounts_dir / "skills"
    if spec.packages_dir is not None:
        paths["packages"] = spec.packages_dir
    if spec.ca_dir is not None:
        paths["ca"] = spec.ca_dir
        paths["ca_bundle"] = spec.ca_dir / BUNDLE
    opened: dict[str, int] = {}
    try:
        for name, path in paths.items():
            kind = 0 if name == "ca_bundle" else os.O_DIRECTORY
            # The mount tree's root is root's (``mounts.py``): its skills
            # directory cannot be a link the sandbox planted, but never follow one.
            kind |= os.O_NOFOLLOW if name == "skills" else 0
            opened[name] = os.open(path, os.O_PATH | kind | os.O_CLOEXEC)
    except OSError as exc:
        for fd in opened.values():
            os.close(fd)
        raise SandboxUnavailable(f"cannot open the sandbox's {name}: {exc.strerror}") from None
    return opened
