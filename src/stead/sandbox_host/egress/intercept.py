"""TLS termination of a CONNECT tunnel (DESIGN rule 8): the proxy answers the
sandbox's TLS with a leaf certificate for the host it asked for, signed by the
installation's egress CA, opens its own TLS to the origin (verified against the
host's trust store and the operator's extra CAs), and forwards the HTTP/1.1
requests in between one by one, keeping both connections alive, so credentials
can be injected into them as into plain HTTP (``origin.py``).

A tunnel whose first bytes are not a TLS handshake is relayed untouched: the
allowlist already held, and there is nothing to inject into. An origin whose
certificate does not verify never gets a request: the sandbox's first request
is answered ``502`` with the reason.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

import anyio
import h11
from anyio.abc import ByteStream
from anyio.streams.tls import TLSStream

from stead.egress_policy import (
    EgressError,
    EgressPolicy,
    UpstreamFailed,
    UpstreamTimeout,
    normalize_host,
)
from stead.sandbox_host.egress.audit import AuditLog, Exchange
from stead.sandbox_host.egress.errors import BadRequest
from stead.sandbox_host.egress.origin import Bodies, forward
from stead.sandbox_host.egress.reply import answer
from stead.sandbox_host.egress.request import MAX_HEAD_BYTES, Kind, Target, read_request
from stead.sandbox_host.egress.secrets import Secrets
from stead.sandbox_host.egress.trust import EgressTls

log = logging.getLogger("stead.sandbox_host.egress")

TLS_HANDSHAKE = 0x16
"""The first byte of every TLS record that starts a handshake."""

_BROKEN = (ssl.SSLError, OSError, anyio.BrokenResourceError, anyio.EndOfStream)


class Replayed(ByteStream):
    """``stream`` with ``first`` put back in front of what it receives next."""

    def __init__(self, stream: ByteStream, first: bytes) -> None:
        self._stream = stream
        self._first = first

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._first:
            data, self._first = self._first[:max_bytes], self._first[max_bytes:]
            return data
        return await self._stream.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._stream.send(item)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


class Interception:
    """One terminated tunnel: the settings it runs under and what it reports to."""

    def __init__(
        self,
        tls: EgressTls,
        policy: Callable[[], EgressPolicy],
        secrets: Callable[[], Secrets],
        audit: AuditLog | None,
        *,
        connect_timeout: float,
        idle_timeout: float,
        head_timeout: float,
        bodies: Bodies,
    ) -> None:
        self.tls = tls
        self.policy = policy
        self.secrets = secrets
        self.audit = audit
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.head_timeout = head_timeout
        self.bodies = bodies

    async def run(self, client: ByteStream, upstream: ByteStream, target: Target) -> None:
        """Serves the tunnel until either side closes or stays idle. Closes neither
        raw stream (the caller owns them)."""
        inside = await self._accept(client, target)
        if inside is None:
            return
        outside = await self._open_origin(upstream, target)
        if isinstance(outside, UpstreamFailed):
            await self._refuse_first(inside, target, outside)
            return
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        origin = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        while await self._one(inside, conn, outside, origin, target):
            try:
                conn.start_next_cycle()
                origin.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _accept(self, client: ByteStream, target: Target) -> TLSStream | None:
        context = self.tls.ca.server_context(normalize_host(target.host))
        try:
            with anyio.fail_after(self.head_timeout):
                return await TLSStream.wrap(
                    client, server_side=True, ssl_context=context, standard_compatible=False
                )
        except (TimeoutError, *_BROKEN) as exc:
            # Most often the client does not trust the egress CA. Debug only, as
            # the sandbox chooses how often (the audit log has each).
            log.debug("egress TLS from the sandbox to %s failed: %s", target.host, exc)
            self._record(Exchange(target.host, target.port, "CONNECT", error="client TLS failed"))
            return None

    async def _open_origin(
        self, upstream: ByteStream, target: Target
    ) -> TLSStream | UpstreamFailed:
        where = f"{target.host}:{target.port}"
        try:
            with anyio.fail_after(self.connect_timeout):
                # The name the credentials matched (``normalize_host``): a
                # trailing dot is no part of a certificate's names, nor of SNI.
                return await TLSStream.wrap(
                    upstream,
                    hostname=normalize_host(target.host),
                    ssl_context=self.tls.upstream,
                    standard_compatible=False,
                )
        except ssl.SSLCertVerificationError as exc:
            reason = exc.verify_message or exc.reason or "verification failed"
            return UpstreamFailed(where, f"the origin's TLS certificate is not trusted: {reason}")
        except TimeoutError:
            return UpstreamTimeout(where, "the TLS handshake with the origin timed out")
        except _BROKEN as exc:
            return UpstreamFailed(where, f"the TLS handshake with the origin failed: {exc}")

    async def _refuse_first(self, inside: TLSStream, target: Target, error: UpstreamFailed) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        exchange = Exchange(target.host, target.port, "", status=error.status, error=str(error))
        try:
            with anyio.fail_after(self.head_timeout):
                request = await read_request(inside, conn)
        except (TimeoutError, EgressError, *_BROKEN):
            request = None
        if request is not None:
            exchange.method = request.method.decode("ascii", "replace")
            await answer(inside, error.status, str(error), self.head_timeout)
        self._record(exchange)

    async def _one(
        self,
        inside: TLSStream,
        conn: h11.Connection,
        outside: TLSStream,
        origin: h11.Connection,
        target: Target,
    ) -> bool:
        """One request inside the tunnel; whether the tunnel may carry another."""
        try:
            with anyio.fail_after(self.idle_timeout):
                request = await read_request(inside, conn)
        except (TimeoutError, *_BROKEN):
            return False
        except EgressError as exc:
            await answer(inside, exc.status, str(exc), self.head_timeout)
            return False
        if request is None:
            return False
        method = request.method.decode("ascii", "replace")
        exchange = Exchange(target.host, target.port, method)
        try:
            # Each request, not only the CONNECT: a policy replaced since (the
            # environment was updated) applies in a kept-alive tunnel too.
            self.policy().check_host(target.host)
            return await forward(
                inside,
                conn,
                request,
                _inner(target, request),
                outside,
                idle_timeout=self.idle_timeout,
                secrets=self.secrets().for_host(target.host, target.port),
                exchange=exchange,
                bodies=self.bodies,
                origin=origin,
            )
        except EgressError as exc:
            exchange.status, exchange.error = exc.status, str(exc)
            await answer(inside, exc.status, str(exc), self.head_timeout)
            return False
        finally:
            self._record(exchange)

    def _record(self, exchange: Exchange) -> None:
        if self.audit is not None:
            self.audit.record(exchange)


def _inner(tunnel: Target, request: h11.Request) -> Target:
    """Where a request inside the tunnel goes: always the tunnel's host and port."""
    if not request.target.startswith(b"/") and request.target != b"*":
        raise BadRequest("a request inside a tunnel needs an origin-form target (/path)")
    host = f"[{tunnel.host}]" if ":" in tunnel.host else tunnel.host
    authority = host if tunnel.port == 443 else f"{host}:{tunnel.port}"
    return Target(
        Kind.FORWARD,
        tunnel.host,
        tunnel.port,
        path=request.target,
        authority=authority.encode("ascii"),
    )
