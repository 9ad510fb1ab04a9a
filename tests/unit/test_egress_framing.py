"""How the egress proxy frames the requests it forwards, against origins that
read framing the lenient way many servers do: what a sandbox may put in a
request must never make the origin read the proxy's next request (and the
credential injected into it) as part of one the sandbox wrote. Real sockets, a
loopback HTTPS origin with a test CA, as in ``test_egress_tls``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
import trustme
from anyio.streams.tls import TLSStream

from stead.sandbox_host.egress import EgressTls, HeaderSecret, Secrets
from tests.unit.test_egress_proxy import eventually
from tests.unit.test_egress_tls import (
    SECRET,
    WAIT,
    https_origin,
    open_tunnel,
    proxy,
    test_ca,
    tls,
    workdir,
)

pytestmark = pytest.mark.anyio
__all__ = ["test_ca", "tls", "workdir"]  # fixtures


@dataclass
class Seen:
    """A request as the origin read it; ``body`` grows as it arrives."""

    line: bytes
    body: bytes = b""
    answered: bool = False


@dataclass
class LenientOrigin:
    """Frames a request by ``Content-Length`` when it has one, else by chunks: a
    server that prefers Content-Length when a request has both (RFC 9112 says
    Transfer-Encoding wins), as a proxy's backend often does."""

    seen: list[Seen] = field(default_factory=list)
    _buffer: bytes = b""

    async def serve(self, stream: TLSStream) -> None:
        async with stream:
            try:
                while True:
                    head = await self._until(stream, b"\r\n\r\n")
                    seen = Seen(head.split(b"\r\n", 1)[0])
                    self.seen.append(seen)
                    fields = dict(_field(line) for line in head.split(b"\r\n")[1:])
                    if b"content-length" in fields:
                        await self._read(stream, seen, int(fields[b"content-length"]))
                    elif fields.get(b"transfer-encoding") == b"chunked":
                        while size := int(await self._until(stream, b"\r\n"), 16):
                            await self._read(stream, seen, size)
                            await self._until(stream, b"\r\n")
                        await self._until(stream, b"\r\n")
                    seen.answered = True
                    await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return

    async def _until(self, stream: TLSStream, end: bytes) -> bytes:
        while end not in self._buffer:
            self._buffer += await stream.receive()
        found, self._buffer = self._buffer.split(end, 1)
        return found

    async def _read(self, stream: TLSStream, seen: Seen, size: int) -> None:
        while size:
            if not self._buffer:
                self._buffer = await stream.receive()
            part, self._buffer = self._buffer[:size], self._buffer[size:]
            seen.body += part
            size -= len(part)


def _field(line: bytes) -> tuple[bytes, bytes]:
    name, _, value = line.partition(b":")
    return name.strip().lower(), value.strip()


async def test_a_request_with_both_framings_cannot_smuggle_another(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    """Before, a request with both Content-Length and Transfer-Encoding went on
    with both: the origin read the chunked body's first bytes as the body, the
    rest as a request of the sandbox's own (POST /store, Content-Length: 4096),
    and the proxy's next request, credential and all, as that one's body, for
    the origin to keep where the sandbox could read it."""
    origin_app = LenientOrigin()
    path = workdir / "proxy.sock"
    smuggled = b"POST /store HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4096\r\n\r\n"
    size = f"{len(smuggled):x}\r\n".encode()
    first = (
        b"POST /a HTTP/1.1\r\nHost: api.test\r\n"
        b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
        % len(size)
        + size
        + smuggled
        + b"\r\n0\r\n\r\n"
    )
    async with (
        https_origin(test_ca, handler=origin_app.serve) as origin,
        proxy(path, tls, Secrets(), "api.test") as running,
    ):
        bearer = b"Bearer " + SECRET
        running.secrets = Secrets(
            [HeaderSecret("api.test", b"authorization", bearer, "repo", port=origin.port)]
        )
        async with await open_tunnel(path, "api.test", origin.port, tls) as stream:
            await stream.send(first)
            got = b""
            with anyio.fail_after(WAIT):
                while not got.endswith(b"0\r\n\r\n"):
                    got += await stream.receive()
            await stream.send(b"GET /b HTTP/1.1\r\nHost: api.test\r\n\r\n")
            await eventually(
                lambda: (
                    any(SECRET in seen.body for seen in origin_app.seen)
                    or any(s.line.startswith(b"GET /b ") and s.answered for s in origin_app.seen)
                )
            )
    assert not any(SECRET in seen.body for seen in origin_app.seen)
    assert [(s.line.split(b" ")[1], s.body) for s in origin_app.seen] == [
        (b"/a", smuggled),
        (b"/b", b""),
    ]
