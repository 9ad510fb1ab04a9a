"""One sandbox's egress proxy: an HTTP/1.1 proxy on a Unix socket that enforces the
environment's ``EgressPolicy`` (DESIGN rule 7: egress is enforced at the network
namespace, since this socket is the sandbox's only way out).

Each connection carries one request: ``CONNECT host:port`` becomes a tunnel whose
TLS the proxy terminates when it has the egress CA (``intercept.py``; else a
byte tunnel), an absolute ``http://`` request is forwarded (``origin.py``).
Credentials (``secrets.py``) are injected into both kinds, and every request is
written to the sandbox's audit log (``audit.py``). The client is
untrusted: the head is bounded in size and time, connections are bounded in
number, and every wait on either peer has a timeout. The proxy owns one task
group; closing it cancels every connection, closes both ends of every tunnel and
unlinks the socket.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType

import anyio
import h11
from anyio.abc import ByteStream, SocketStream, TaskGroup

from stead.egress_policy import Denied, EgressError, EgressPolicy, Resolver, threaded_resolver
from stead.sandbox.unix import UnixStream, close_listener, listen_unix, next_connection
from stead.sandbox_host.egress.audit import AuditLog, Exchange
from stead.sandbox_host.egress.dial import dial
from stead.sandbox_host.egress.intercept import TLS_HANDSHAKE, Interception, Replayed
from stead.sandbox_host.egress.origin import Bodies, forward
from stead.sandbox_host.egress.reply import answer, send_quietly
from stead.sandbox_host.egress.request import (
    MAX_HEAD_BYTES,
    READ_CHUNK,
    Kind,
    Target,
    parse_target,
    read_request,
)
from stead.sandbox_host.egress.secrets import Secrets
from stead.sandbox_host.egress.splice import splice
from stead.sandbox_host.egress.trust import EgressTls

log = logging.getLogger("stead.sandbox_host.egress")

HEAD_TIMEOUT = 10.0
"""Default limit on receiving a whole request head (slowloris)."""

MAX_CONNECTIONS = 256
"""Default limit on one proxy's concurrent client connections."""

LOOKUPS = 4
"""Name lookups one proxy (one sandbox) has in flight at once, each on a thread
of its own (``threaded_resolver``): one sandbox's names that never resolve wait
on its own four, not on the lookups of every other sandbox of the host."""
BODY_LIMIT = 8 * 1024 * 1024
"""Default limit on a request body read whole to inject credentials into it."""
HELD_BODIES_LIMIT = 32 * 1024 * 1024
"""Bytes of bodies (read whole to inject into) one proxy holds at once: a
sandbox's share of the host's memory, whatever its connections do."""

SOCKET_MODE = 0o666
# Anyone who can reach the socket may use it: it is bind-mounted from a directory
# that only this sandbox's mount namespace sees, and the sandbox runs as its own
# uid, which a narrower mode would have to match. The policy, not the mode, is
# the access control.

_CONNECTED = b"HTTP/1.1 200 Connection Established\r\n\r\n"


class EgressProxy:
    """``async with EgressProxy(path, policy, connect_timeout=..., idle_timeout=...)``
    serves until the block ends.

    ``connect_timeout`` bounds resolving and, separately, connecting upstream (and
    the TLS handshake with it); ``idle_timeout`` ends a tunnel or a forwarded
    exchange after that long with no byte either way; ``head_timeout`` bounds
    receiving a request head. ``resolver`` maps a name to addresses (default: the
    system's ``getaddrinfo``); ``pinned`` names resolve to the operator's address
    instead, which passes the blocklist (``STEAD_EGRESS_HOSTS``). With ``tls`` the
    proxy terminates the TLS of CONNECT tunnels. ``secrets`` are injected into
    requests (``secrets.py``); ``audit`` receives an entry per request.
    ``policy`` and ``secrets`` may be replaced while serving; they apply to
    requests that arrive afterwards (in a kept-alive tunnel too), and open byte
    tunnels keep running.

    Counters: ``active_connections`` (client connections open now), ``allowed``
    (requests that reached an upstream), ``denied`` (requests answered 403).
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        policy: EgressPolicy,
        *,
        connect_timeout: float,
        idle_timeout: float,
        resolver: Resolver | None = None,
        head_timeout: float = HEAD_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        secrets: Secrets | None = None,
        tls: EgressTls | None = None,
        pinned: Mapping[str, str] | None = None,
        audit: AuditLog | None = None,
        body_limit: int = BODY_LIMIT,
        held_bodies_limit: int = HELD_BODIES_LIMIT,
        counted: Callable[[bool], None] | None = None,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.policy = policy
        self.secrets = secrets or Secrets()
        """What the proxy injects (rule 8); memory only, never logged."""
        self.tls = tls
        self.audit = audit
        self.bodies = Bodies(body_limit, held_bodies_limit)
        self._pinned = dict(pinned or {})
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.head_timeout = head_timeout
        self.max_connections = max_connections
        self._resolver: Resolver = resolver or threaded_resolver(anyio.CapacityLimiter(LOOKUPS))
        self._active = 0
        self._allowed = 0
        self._denied = 0
        self._counted = counted
        """Told of each request's decision (allowed or not): the host's metrics."""
        self._stack: AsyncExitStack | None = None

    @property
    def active_connections(self) -> int:
        return self._active

    @property
    def allowed(self) -> int:
        return self._allowed

    @property
    def denied(self) -> int:
        return self._denied

    async def __aenter__(self) -> EgressProxy:
        if self._stack is not None:
            raise RuntimeError("the egress proxy is already serving")
        _remove_stale_socket(self.socket_path)
        async with AsyncExitStack() as stack:
            listener = listen_unix(self.socket_path, mode=SOCKET_MODE, backlog=self.max_connections)
            # Unwound in reverse: cancel, wait for the connections, close, unlink.
            stack.callback(self._unlink)
            stack.callback(close_listener, listener)
            tasks = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tasks.cancel_scope.cancel)
            tasks.start_soon(self._accept_loop, listener, tasks)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, traceback)

    def _unlink(self) -> None:
        self.socket_path.unlink(missing_ok=True)

    async def _accept_loop(self, listener: socket.socket, tasks: TaskGroup) -> None:
        while True:
            client = await next_connection(listener)  # EMFILE and the like: logged, retried
            if self._active >= self.max_connections:
                tasks.start_soon(self._refuse, client)
                continue
            self._active += 1
            tasks.start_soon(self._serve, client)

    async def _refuse(self, client: UnixStream) -> None:
        async with client:
            await answer(client, 503, "too many connections", self.head_timeout)

    async def _serve(self, client: UnixStream) -> None:
        try:
            async with client:
                await self._exchange(client)
        except Exception:  # one connection's bug must not cancel every other tunnel
            log.exception("egress proxy %s: connection failed", self.socket_path)
        finally:
            self._active -= 1

    async def _exchange(self, client: UnixStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        exchange = Exchange("", 0)
        try:
            with anyio.fail_after(self.head_timeout):
                request = await read_request(client, conn)
            if request is None:
                return
            target = parse_target(request)
            exchange = Exchange(target.host, target.port, request.method.decode("ascii"))
            upstream = await dial(
                target.host,
                target.port,
                self.policy,
                resolver=self._resolver,
                connect_timeout=self.connect_timeout,
                pinned=self._pinned,
            )
        except TimeoutError:
            await answer(client, 408, "timed out reading the request head", self.head_timeout)
            return
        except EgressError as exc:
            if isinstance(exc, Denied):
                self._denied += 1
                if self._counted is not None:
                    self._counted(False)
                # Each is in the audit log; at info the host's log would grow
                # as fast as a sandbox in a loop can ask.
                log.debug("egress proxy %s: %s", self.socket_path, exc)
            await answer(client, exc.status, str(exc), self.head_timeout)
            if exchange.host:
                exchange.status, exchange.error = exc.status, str(exc)
                self._record(exchange)
            return
        self._allowed += 1
        if self._counted is not None:
            self._counted(True)
        async with upstream:
            if target.kind is Kind.CONNECT:
                await self._connect(client, upstream, conn, target)
                return
            try:
                await forward(
                    client,
                    conn,
                    request,
                    target,
                    upstream,
                    idle_timeout=self.idle_timeout,
                    secrets=self.secrets.for_host(target.host, target.port, tls=False),
                    exchange=exchange,
                    bodies=self.bodies,
                )
            except EgressError as exc:
                exchange.status, exchange.error = exc.status, str(exc)
                await answer(client, exc.status, str(exc), self.head_timeout)
            finally:
                self._record(exchange)

    async def _connect(
        self, client: UnixStream, upstream: SocketStream, conn: h11.Connection, target: Target
    ) -> None:
        early, _ = conn.trailing_data  # bytes sent right behind the CONNECT head
        if not await send_quietly(client, _CONNECTED, self.idle_timeout):
            return
        if self.tls is not None:
            if not early:
                # A protocol whose server speaks first sends nothing here: after
                # the wait it is relayed as bytes like any other non-TLS tunnel.
                with anyio.move_on_after(self.head_timeout):
                    early = await _receive_quietly(client)
            if early[:1] == bytes([TLS_HANDSHAKE]):
                await self._interception().run(Replayed(client, early), upstream, target)
                return
        exchange = Exchange(target.host, target.port, "CONNECT", status=200)
        counted = _Counted(client, exchange)
        try:
            await splice(counted, upstream, idle_timeout=self.idle_timeout, a_to_b_first=early)
        finally:
            exchange.bytes_out += len(early)
            self._record(exchange)

    def _interception(self) -> Interception:
        assert self.tls is not None
        return Interception(
            self.tls,
            lambda: self.policy,
            lambda: self.secrets,
            self.audit,
            connect_timeout=self.connect_timeout,
            idle_timeout=self.idle_timeout,
            head_timeout=self.head_timeout,
            bodies=self.bodies,
        )

    def _record(self, exchange: Exchange) -> None:
        if self.audit is not None:
            self.audit.record(exchange)


class _Counted(ByteStream):
    """The client's side of a byte tunnel, counting bytes each way for the audit."""

    def __init__(self, client: ByteStream, exchange: Exchange) -> None:
        self._client = client
        self._exchange = exchange

    async def receive(self, max_bytes: int = READ_CHUNK) -> bytes:
        data = await self._client.receive(max_bytes)
        self._exchange.bytes_out += len(data)
        return data

    async def send(self, item: bytes) -> None:
        await self._client.send(item)
        self._exchange.bytes_in += len(item)

    async def send_eof(self) -> None:
        await self._client.send_eof()

    async def aclose(self) -> None:
        await self._client.aclose()


async def _receive_quietly(client: UnixStream) -> bytes:
    try:
        return await client.receive(READ_CHUNK)
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return b""


def _remove_stale_socket(path: Path) -> None:
    """Unlinks a socket left by a host that died; anything else at ``path`` stays and
    makes binding fail."""
    try:
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()
    except FileNotFoundError:
        pass
