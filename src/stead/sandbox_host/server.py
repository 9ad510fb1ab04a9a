"""The sandbox host daemon: RPC over a Unix socket (0600 in a 0700 directory:
the socket's permissions are the authentication) and, for a remote brain, TCP
with a shared token, in TLS keyed by that token (``stead.sandbox.host_tls``).

One connection carries one call at a time (``rpc.py``, ``stead.sandbox.ops``). A call keeps
running when its caller goes away: an exec whose brain was killed finishes and
records its result under its op key, which the restarted brain collects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import resource
import secrets
import shutil
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from anyio import to_thread
from anyio.abc import ByteStream, TaskStatus
from anyio.streams.tls import TLSStream

from stead.blobs import open_blob_store
from stead.egress_policy import upstream_context
from stead.failpoints import FailPoints
from stead.sandbox import (
    HostIdentity,
    IsolationUnavailable,
    VersionMismatch,
    ops,
)
from stead.sandbox.host_tls import server_context, token_authority
from stead.sandbox.protocol import (
    FrameStream,
    ProtocolError,
    error_frame,
)
from stead.sandbox.unix import UnixListener, listen_unix
from stead.sandbox_host.bwrap import install_supervisor
from stead.sandbox_host.catalogue import Catalogue, CatalogueTooNew
from stead.sandbox_host.cgroups import detect_cgroups
from stead.sandbox_host.clock import HostClock
from stead.sandbox_host.config import HostOptions, check_endpoint
from stead.sandbox_host.disk import unmount_all
from stead.sandbox_host.egress import CertificateAuthority, EgressTls, write_sandbox_bundle
from stead.sandbox_host.egress.intercept import TLS_HANDSHAKE, Replayed
from stead.sandbox_host.manager import Isolation, SandboxManager
from stead.sandbox_host.rpc import HELLO_MAX_FRAME, HELLO_SECONDS, HostRpc
from stead.sandbox_host.selfcheck import check_isolation
from stead.sandbox_host.snapshots import remove_stale_staging
from stead.sandbox_host.uids import UidRange, UidRegistry

log = logging.getLogger("stead.sandbox.host")

PROBE_SECONDS = 1.0
"""How long the start waits on a host that may answer at its socket path."""
UNIX_BACKLOG = 128
"""Connections waiting to be accepted on the brain's socket (the kernel's default cap)."""


class HostAlreadyRunning(Exception):
    """Another sandbox host holds this state directory, or listens at its socket."""


class HostCannotStart(Exception):
    """A setting the host cannot start with that only its start finds out (a
    directory it cannot make, an address it cannot listen on); the message
    begins with the setting's name (``STEAD_...: ``)."""


async def serve_host(
    options: HostOptions,
    *,
    clock: HostClock | None = None,
    task_status: TaskStatus[SandboxManager] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Runs the sandbox host until cancelled; bodies are stopped on the way out.
    ``HostCannotStart`` or ``HostAlreadyRunning`` (in an exception group, from
    its listeners) if it cannot start."""
    if options.listen_tcp and not options.token:
        raise HostCannotStart(
            "STEAD_SANDBOX_HOST_LISTEN_TCP: a TCP listener needs STEAD_SANDBOX_HOST_TOKEN"
        )
    _check_socket(options)
    _make_directory(options.state_dir, 0o700, "STEAD_SANDBOX_HOST_STATE_DIR")
    _make_directory(options.work_dir, 0o711, "STEAD_SANDBOX_WORK_DIR")
    options = _raise_open_files(options)
    with (
        _single_instance(options),
        contextlib.closing(_catalogue(options)) as catalogue,
    ):
        blobs = open_blob_store(options.blobs)
        span = await catalogue.uid_span()
        isolation, problem = await to_thread.run_sync(_check, options, span)
        cgroups = isolation.cgroups if isolation is not None else None
        async with anyio.create_task_group() as tasks:
            manager = SandboxManager(
                options,
                catalogue=catalogue,
                blobs=blobs,
                isolation=isolation,
                isolation_problem=problem,
                tasks=tasks,
                clock=clock,
                failpoints=FailPoints(options.failpoints),
            )
            try:
                await manager.load()
                tasks.start_soon(manager.sleep_idle, name="idle sleeper")
                tasks.start_soon(manager.collect_garbage, name="garbage collector")
                if isolation is not None:
                    tasks.start_soon(manager.spares.keep_made, name="spare disks")
                identity = HostIdentity(_host_id(options), options.advertise)
                rpc = HostRpc(manager, token=options.token, identity=identity)
                async with _listeners(options) as listeners:
                    for listener, tls in listeners:
                        tasks.start_soon(_serve_listener, listener, rpc, tls, tasks)
                    log.info(
                        "sandbox host %s ready on %s (others reach it at %s)",
                        identity.host_id,
                        options.socket_path,
                        identity.address or "no address",
                    )
                    task_status.started(manager)
                    await anyio.sleep_forever()
            finally:
                await manager.aclose()
                tasks.cancel_scope.cancel()
                if cgroups is not None:
                    cgroups.release()


def _catalogue(options: HostOptions) -> Catalogue:
    try:
        return Catalogue.open(options.state_dir / "catalogue.sqlite3")
    except CatalogueTooNew as exc:  # a host downgraded, say: as a newer database is refused
        raise HostCannotStart(str(exc)) from None


def _host_id(options: HostOptions) -> str:
    """This host's identity: made once, kept in its state directory, so a host
    that restarts on the same state (and sandboxes) is the same host."""
    path = options.state_dir / "host-id"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        made = f"host_{socket.gethostname()[:40]}_{secrets.token_hex(6)}"
        path.write_text(made + "\n")
        return made


def _check(
    options: HostOptions, span: tuple[int, int] | None
) -> tuple[Isolation | None, str | None]:
    """The cgroups and uids to use, or why isolation is impossible. ``span``
    is the lowest and highest uid the catalogue's sandboxes have."""
    # Each host's cgroups live under a parent of its own, and its uids in a
    # range of its own, so two hosts on one machine (a test's and an
    # operator's) never sweep each other's sandboxes nor share a uid.
    cgroups = None
    try:
        _prepare_work_dir(options)
        tls = _egress_tls(options)
        uids = _claim_uids(options, span)
        cgroups = detect_cgroups(parent=f"stead-{options.host_tag}")
        report = check_isolation(
            options.bwrap, probe_uid=uids.probe_uid, cgroups=cgroups, work_dir=options.work_dir
        )
        report.raise_if_unusable()
    except IsolationUnavailable as exc:
        if cgroups is not None:
            cgroups.release()
        log.error("sandboxes refused: %s", exc.reason)
        return None, exc.reason
    removed = cgroups.sweep_stale()
    if removed:
        log.info("removed %d stale sandbox cgroups", len(removed))
    return Isolation(cgroups, uids, tls), None


def _egress_tls(options: HostOptions) -> EgressTls:
    """The installation's egress CA (made once, kept in the state directory) and
    the bundle every sandbox trusts, rewritten at each start so that it follows
    the machine's CAs."""
    try:
        ca = CertificateAuthority.load_or_create(options.state_dir / "egress-ca")
        write_sandbox_bundle(options.work_dir / "ca", ca.cert_pem)
        upstream = upstream_context(options.egress_extra_ca_file)
    except (OSError, ValueError) as exc:
        raise IsolationUnavailable(f"cannot set up the egress CA: {exc}") from None
    return EgressTls(ca, upstream)


def _claim_uids(options: HostOptions, span: tuple[int, int] | None) -> UidRange:
    """This host's uid range from the machine's registry; a host new to the
    registry whose catalogue has sandboxes asks for the block holding them."""
    registry = UidRegistry(options.uid_registry)
    prefer = span[0] if span is not None else None
    try:
        uids = registry.claim(
            options.state_dir, count=options.uid_count, base=options.uid_base, prefer=prefer
        )
    except OSError as exc:
        raise IsolationUnavailable(
            f"cannot claim sandbox uids in {registry.path} ({exc}): "
            "set STEAD_SANDBOX_UID_REGISTRY to a file root may write"
        ) from None
    log.info("sandbox uids %d-%d (registry %s)", uids.base, uids.last, registry.path)
    if span is not None and not (span[0] in uids and span[1] in uids):
        # Sandboxes made before this range was claimed keep their uids, so
        # that they still own their files.
        log.warning(
            "sandboxes of this host have uids %d-%d, outside its range %d-%d",
            *span,
            uids.base,
            uids.last,
        )
    return uids


def _prepare_work_dir(options: HostOptions) -> None:
    """Puts the supervisor's code in the work directory (made at start);
    refuses one that sandbox uids could not reach."""
    work = options.work_dir
    for parent in [work, *work.parents]:
        if not parent.stat().st_mode & 0o001:
            raise IsolationUnavailable(
                f"the sandbox work directory {work} is not reachable by sandbox users: "
                f"{parent} is not searchable by others (chmod o+x {parent}, or set "
                "STEAD_SANDBOX_WORK_DIR to a directory under /var/lib)"
            )
    lib = work / "lib"
    shutil.rmtree(lib, ignore_errors=True)
    lib.mkdir(mode=0o755)
    install_supervisor(lib)
    for name in ("sandboxes", "packages"):
        (work / name).mkdir(exist_ok=True)
        os.chmod(work / name, 0o711)
    # No restore runs before this host serves: any staging tree is a killed
    # host's, and would otherwise stay on disk for the sandbox's lifetime.
    stale = sum(remove_stale_staging(sandbox) for sandbox in (work / "sandboxes").iterdir())
    if stale:
        log.info("removed %d restores left unfinished by an earlier host", stale)
    # Nor is any sandbox's disk held yet: one mounted is a killed host's.
    mounted = unmount_all(work / "sandboxes")
    if mounted:
        log.info("unmounted %d sandbox disks left mounted by an earlier host", mounted)


def _make_directory(path: Path, mode: int, setting: str) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, mode)
    except OSError as exc:
        raise HostCannotStart(f"{setting}: cannot make {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def _single_instance(options: HostOptions) -> Any:
    path = options.state_dir / "host.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HostAlreadyRunning(
                f"another sandbox host is running on {options.state_dir}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


@contextlib.asynccontextmanager
async def _listeners(
    options: HostOptions,
) -> AsyncIterator[list[tuple[Any, ssl.SSLContext | None]]]:
    """The Unix socket's listener, and the TCP one with its TLS when set."""
    path = options.socket_path
    unix = await _unix_listener(options)
    listeners: list[tuple[Any, ssl.SSLContext | None]] = [(unix, None)]
    try:
        if options.listen_tcp:
            assert options.token is not None  # serve_host checked
            authority = await to_thread.run_sync(token_authority, options.token)
            host, port = check_endpoint(options.listen_tcp, "a host:port")
            try:
                tcp = await anyio.create_tcp_listener(
                    local_host=host or "127.0.0.1", local_port=port
                )
            except OSError as exc:
                raise HostCannotStart(
                    f"STEAD_SANDBOX_HOST_LISTEN_TCP: cannot listen on {options.listen_tcp}: "
                    f"{exc.strerror or exc}"
                ) from None
            listeners.append((tcp, server_context(authority)))
        yield listeners
    finally:
        with anyio.CancelScope(shield=True):
            for listener, _ in listeners:
                await listener.aclose()
        path.unlink(missing_ok=True)


def _socket_setting(options: HostOptions) -> str:
    return "STEAD_SANDBOX_HOST" if options.socket else "STEAD_SANDBOX_HOST_STATE_DIR"


def _raise_open_files(options: HostOptions) -> HostOptions:
    """Raises the host's soft limit on open files to its hard limit; ``options``
    with the soft limit it had, which sandboxes keep. Each egress proxy holds
    two files per connection, up to ``MAX_CONNECTIONS`` a sandbox: under the
    1024 a service manager gives by default, two sandboxes opening tunnels left
    the host unable to open a file for any other (no wake, no call, no snapshot)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or options.sandbox_open_files is not None:
        return options
    if hard == resource.RLIM_INFINITY:  # the kernel caps it at fs.nr_open
        hard = int(Path("/proc/sys/fs/nr_open").read_text())
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, hard), hard))
    except (OSError, ValueError) as exc:
        log.warning("the limit on open files stays at %d: %s", soft, exc)
    return dataclasses.replace(options, sandbox_open_files=soft)


def _check_socket(options: HostOptions) -> None:
    """Refuses a socket path that is something else, or that another host
    answers on (one outside the state directory, ``STEAD_SANDBOX_HOST``, is
    not kept by the state directory's lock). Any other is a dead host's."""
    path = options.socket_path
    if path.exists() and not path.is_socket():
        raise HostCannotStart(f"{_socket_setting(options)}: {path} is there and is not a socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_SECONDS)
        try:
            probe.connect(str(path))
        except OSError:
            return
    raise HostAlreadyRunning(f"another sandbox host listens at {path}")


async def _unix_listener(options: HostOptions) -> Any:
    """The brain's socket, 0600, in place of a dead host's."""
    path = options.socket_path
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        old_umask = os.umask(0o177)
        try:
            return UnixListener(listen_unix(path, mode=0o600, backlog=UNIX_BACKLOG))
        finally:
            os.umask(old_umask)
    except OSError as exc:
        raise HostCannotStart(
            f"{_socket_setting(options)}: cannot listen at {path}: {exc.strerror or exc}"
        ) from None


async def _serve_listener(
    listener: Any, rpc: HostRpc, tls: ssl.SSLContext | None, tasks: Any
) -> None:
    """Serves each connection; on TCP (``tls``), once it is TLS."""

    async def handle(stream: ByteStream) -> None:
        if tls is not None:
            secured = await _secured(stream, tls)
            if secured is None:
                return
            stream = secured
        await rpc.serve_connection(FrameStream(stream), tcp=tls is not None)

    await listener.serve(handle, task_group=tasks)


async def _plain_version(frames: FrameStream) -> str:
    """The version a brain from before TLS gives in its plain hello (which
    also carries its token: only the version is read), or "an older one"."""
    try:
        hello = await frames.receive(limit=HELLO_MAX_FRAME)
    except ProtocolError:
        hello = None
    version = hello.get("version") if isinstance(hello, dict) else None
    if isinstance(version, int) and not isinstance(version, bool):
        return str(version)
    return "an older one"


async def _secured(stream: ByteStream, tls: ssl.SSLContext) -> ByteStream | None:
    """``stream`` after the TLS handshake; None, and closed, if none came in
    time or it failed. A brain of an older stead, which sent its hello in plain
    frames, is answered in one that names the versions."""
    try:
        with anyio.fail_after(HELLO_SECONDS):
            first = await stream.receive()
            whole = Replayed(stream, first)
            if first[0] != TLS_HANDSHAKE:
                frames = FrameStream(whole)
                older = VersionMismatch(
                    f"the brain speaks host protocol version {await _plain_version(frames)}, "
                    f"in plain TCP, and this sandbox host version {ops.PROTOCOL_VERSION}, "
                    "over TLS: run the same stead version on both"
                )
                await frames.send(error_frame(older))
            else:
                return await TLSStream.wrap(
                    whole, server_side=True, ssl_context=tls, standard_compatible=False
                )
    except (TimeoutError, OSError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
        # ssl.SSLError is an OSError: a port scan, a wrong token; no traceback.
        log.debug("a TCP connection to the sandbox host ended before its hello: %r", exc)
    await anyio.aclose_forcefully(stream)
    return None
