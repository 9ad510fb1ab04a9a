"""Egress TLS: what the sandbox's egress proxy adds to one HTTPS request.

What is measured: a GET with a small answer from a loopback HTTPS origin,
through the ``EgressProxy`` as a sandbox makes it (a Unix socket, ``CONNECT``,
TLS terminated by the proxy with a leaf of the egress CA, the request parsed,
a header credential injected, a second TLS connection to the origin verified
against the operator's CA) and directly (TLS to the origin). Two cases: on a
kept-alive connection (the request alone) and on a new connection each time
(connect, handshakes and the request). The origin, the proxy and the client
share one event loop, so each figure is the CPU work the path costs; the
added latency is the difference. Both paths alternate, after a warm-up that
also puts the leaf in the proxy's cache. p50 and the ratio are reported.
"""

from __future__ import annotations

import shutil
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import h11
from anyio.abc import ByteStream
from anyio.streams.tls import TLSListener, TLSStream

from stead.egress_policy import EgressPolicy, upstream_context
from stead.sandbox_host.egress import (
    AuditLog,
    CertificateAuthority,
    EgressProxy,
    EgressTls,
    HeaderSecret,
    Secrets,
)
from stead.testing import serve_origin

# isort: split
from _common import median, size, us

ROUNDS = size("ROUNDS", 400, 5)
NEW_ROUNDS = size("NEW_ROUNDS", 100, 3)
WARMUP = 5
HOST = "origin.test"
BODY = b"x" * 512


async def origin(stream: TLSStream) -> None:
    await serve_origin(stream, lambda request, body: BODY)


async def get(stream: ByteStream, conn: h11.Connection, authority: str) -> None:
    request = h11.Request(method="GET", target="/", headers=[("host", authority)])
    await stream.send(conn.send(request) + conn.send(h11.EndOfMessage()))
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive())
        elif isinstance(event, h11.EndOfMessage):
            conn.start_next_cycle()
            return
        elif isinstance(event, h11.ConnectionClosed):
            raise RuntimeError("the connection closed")


class Paths:
    """Opens a client connection to the origin, directly or through the proxy."""

    def __init__(
        self, port: int, socket: Path, trust_origin: ssl.SSLContext, trust_proxy: ssl.SSLContext
    ) -> None:
        self.port = port
        self.authority = f"{HOST}:{port}"
        self.socket = socket
        self.trust_origin = trust_origin
        self.trust_proxy = trust_proxy

    async def direct(self) -> TLSStream:
        tcp = await anyio.connect_tcp("127.0.0.1", self.port)
        return await TLSStream.wrap(
            tcp, hostname=HOST, ssl_context=self.trust_origin, standard_compatible=False
        )

    async def proxied(self) -> TLSStream:
        unix = await anyio.connect_unix(str(self.socket))
        await unix.send(
            f"CONNECT {self.authority} HTTP/1.1\r\nHost: {self.authority}\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += await unix.receive()
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(head.decode(errors="replace"))
        return await TLSStream.wrap(
            unix, hostname=HOST, ssl_context=self.trust_proxy, standard_compatible=False
        )


async def kept_alive(
    open_: Callable[[], Awaitable[TLSStream]], authority: str, rounds: int
) -> list[float]:
    samples = []
    async with await open_() as stream:
        conn = h11.Connection(h11.CLIENT)
        for _ in range(rounds):
            start = time.perf_counter()
            await get(stream, conn, authority)
            samples.append(time.perf_counter() - start)
    return samples


async def new_connection(open_: Callable[[], Awaitable[TLSStream]], authority: str) -> float:
    start = time.perf_counter()
    async with await open_() as stream:
        await get(stream, h11.Connection(h11.CLIENT), authority)
    return time.perf_counter() - start


async def measure(paths: Paths) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {"direct": [], "proxy": [], "direct_new": [], "proxy_new": []}
    await kept_alive(paths.direct, paths.authority, WARMUP)
    await kept_alive(paths.proxied, paths.authority, WARMUP)
    for _ in range(10):
        found["direct"] += await kept_alive(paths.direct, paths.authority, max(1, ROUNDS // 10))
        found["proxy"] += await kept_alive(paths.proxied, paths.authority, max(1, ROUNDS // 10))
    for _ in range(NEW_ROUNDS):
        found["direct_new"].append(await new_connection(paths.direct, paths.authority))
        found["proxy_new"].append(await new_connection(paths.proxied, paths.authority))
    return found


async def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="stead-bench-egress-", dir="/tmp"))
    try:
        # The origin's certificate comes from a CA of its own, trusted as an
        # operator's extra bundle (STEAD_EGRESS_EXTRA_CA_FILE) would be.
        origin_ca = CertificateAuthority.load_or_create(work / "origin-ca")
        (work / "origin-ca.pem").write_bytes(origin_ca.cert_pem)
        egress_ca = CertificateAuthority.load_or_create(work / "egress-ca")
        tls = EgressTls(egress_ca, upstream_context(work / "origin-ca.pem"))
        policy = EgressPolicy(
            {
                "type": "limited",
                "allowed_hosts": [HOST],
                "allow_mcp_servers": False,
                "allow_package_managers": False,
            }
        )
        secrets = Secrets(
            [HeaderSecret(HOST, b"authorization", b"Bearer bench-secret", "vcrd_bench")]
        )
        listener = TLSListener(
            await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0),
            origin_ca.server_context(HOST),
            standard_compatible=False,
        )
        port = listener.listener.extra(anyio.abc.SocketAttribute.local_port)
        socket = work / "proxy.sock"
        async with (
            listener,
            anyio.create_task_group() as tasks,
            EgressProxy(
                socket,
                policy,
                connect_timeout=10,
                idle_timeout=60,
                secrets=secrets,
                tls=tls,
                pinned={HOST: "127.0.0.1"},
                audit=AuditLog(),
            ),
        ):
            tasks.start_soon(listener.serve, origin)
            trust_origin = ssl.create_default_context(cadata=origin_ca.cert_pem.decode())
            trust_proxy = ssl.create_default_context(cadata=egress_ca.cert_pem.decode())
            found = await measure(Paths(port, socket, trust_origin, trust_proxy))
            tasks.cancel_scope.cancel()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    kept, kept_base = median(found["proxy"]), median(found["direct"])
    new, new_base = median(found["proxy_new"]), median(found["direct_new"])
    print(f"kept-alive: proxy p50 {us(kept)}, direct {us(kept_base)}")
    print(f"new connection: proxy p50 {us(new)}, direct {us(new_base)}")
    print(
        f"egress_tls: kept-alive p50 {us(kept)} vs direct {us(kept_base)}"
        f" (+{us(kept - kept_base)}, {kept / kept_base:.2f}x);"
        f" new connection p50 {us(new)} vs direct {us(new_base)}"
        f" (+{us(new - new_base)}, {new / new_base:.2f}x)"
    )


if __name__ == "__main__":
    # uvloop, as the sandbox host runs (`stead sandbox-host`).
    sys.exit(anyio.run(main, backend_options={"use_uvloop": True}))
