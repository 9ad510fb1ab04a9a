"""What the egress proxy lets back into the sandbox from an origin that echoes
an injected credential, and what it does with a value a request cannot carry:
the ways a secret reached the sandbox or the host's log before (a compressed
echo, the reason phrase, a protocol switch, a value with a line break); and
how much of the host's memory the bodies it reads whole may hold. Real
sockets, a loopback HTTPS origin with a test CA, as in ``test_egress_tls``."""

from __future__ import annotations

import base64
import gzip
import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote, quote_plus

import anyio
import h11
import pytest
import trustme
from anyio.streams.tls import TLSStream

from stead.egress_policy import HostSet
from stead.sandbox_host.egress import EgressTls, PlaceholderSecret, Secrets
from stead.sandbox_host.egress.origin import Bodies
from stead.sandbox_host.egress.scrub import Scrubber, ScrubRules
from tests.unit.test_egress_tls import (
    PLACEHOLDER,
    SECRET,
    WAIT,
    https_origin,
    open_tunnel,
    placeholder_secret,
    proxy,
    request,
    test_ca,
    tls,
    workdir,
)

pytestmark = pytest.mark.anyio
__all__ = ["test_ca", "tls", "workdir"]  # fixtures

AUTH = [("authorization", f"Bearer {PLACEHOLDER.decode()}")]


def answering(
    answer: Callable[[bytes], bytes], heads: list[bytes]
) -> Callable[[TLSStream], object]:
    """An origin that reads one request head, keeps it in ``heads``, and sends
    ``answer(head)`` raw."""

    async def serve(stream: TLSStream) -> None:
        async with stream:
            head = b""
            while not _whole(head):
                head += await stream.receive()
            heads.append(head)
            await stream.send(answer(head))

    return serve


async def exchange(
    workdir: Path,
    tls: EgressTls,
    ca: trustme.CA,
    answer: Callable[[bytes], bytes],
    sent: bytes,
    until: Callable[[bytes], bool],
) -> tuple[bytes, bytes]:
    """``sent`` through the proxy (which injects the test's credential for
    api.test) to an origin that answers ``answer(head)``: the head the origin
    got, and what came back once ``until`` holds."""
    heads: list[bytes] = []
    path = workdir / "proxy.sock"
    secrets = Secrets([], [placeholder_secret("api.test")])
    async with (
        https_origin(ca, handler=answering(answer, heads)) as origin,
        proxy(path, tls, secrets, "api.test"),
        await open_tunnel(path, "api.test", origin.port, tls) as stream,
    ):
        await stream.send(sent)
        got = b""
        with anyio.fail_after(WAIT):
            while not until(got):
                got += await stream.receive()
    return heads[0], got


def _length(head: bytes) -> int:
    """The request's Content-Length, 0 without one."""
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0


def _whole(message: bytes) -> bool:
    """Whether ``message`` holds a whole head and the body its Content-Length says."""
    return b"\r\n\r\n" in message and len(message.split(b"\r\n\r\n", 1)[1]) >= _length(message)


def echoed(head: bytes) -> bytes:
    """The request's authorization header, as the origin saw it."""
    line = next(x for x in head.split(b"\r\n") if x.lower().startswith(b"authorization:"))
    return line.split(b":", 1)[1].strip()


async def test_an_echo_is_asked_for_uncompressed_and_a_compressed_one_is_refused(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    """The scrubber reads plain bytes: before, ``curl --compressed`` got the
    secret back inside a gzip body."""

    def gzipped(head: bytes) -> bytes:
        body = gzip.compress(echoed(head))
        return (
            b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\n"
            + f"content-length: {len(body)}\r\n\r\n".encode()
            + body
        )

    sent = (
        b"GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "
        + PLACEHOLDER
        + b"\r\nAccept-Encoding: gzip, br\r\n\r\n"
    )
    head, got = await exchange(workdir, tls, test_ca, gzipped, sent, _whole)
    assert got.startswith(b"HTTP/1.1 502 ") and SECRET not in got
    assert b"accept-encoding: identity" in head.lower() and b"gzip" not in head.lower()


async def test_a_reason_phrase_that_echoes_the_secret_is_scrubbed(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    def in_reason(head: bytes) -> bytes:
        return b"HTTP/1.1 401 bad credentials " + echoed(head) + b"\r\ncontent-length: 0\r\n\r\n"

    sent = b"GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer " + PLACEHOLDER
    head, got = await exchange(
        workdir, tls, test_ca, in_reason, sent + b"\r\n\r\n", lambda got: b"\r\n\r\n" in got
    )
    assert SECRET in head  # injected on the way out
    assert got.startswith(b"HTTP/1.1 401 bad credentials Bearer " + PLACEHOLDER)
    assert SECRET not in got


async def test_a_request_that_switches_protocols_carries_no_credential(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    """What follows a 101 is relayed as bytes the scrubber cannot rewrite: before,
    the upgrade request got the secret and the origin could echo it after the switch."""

    def switched(head: bytes) -> bytes:
        return (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"x-echo: " + echoed(head) + b"\r\n\r\nframes: " + echoed(head)
        )

    sent = (
        b"GET /ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nAuthorization: Bearer " + PLACEHOLDER + b"\r\n\r\n"
    )
    last = b"frames: Bearer " + PLACEHOLDER
    head, got = await exchange(
        workdir, tls, test_ca, switched, sent, lambda got: got.endswith(last)
    )
    assert got.startswith(b"HTTP/1.1 101 ")
    assert SECRET not in head and SECRET not in got
    # Nor in its body: before this was checked, a body placeholder was replaced.
    body = b"token=" + PLACEHOLDER
    posted = (
        b"POST /ws HTTP/1.1\r\nHost: api.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )

    def echo_body(head: bytes) -> bytes:
        return b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n" + head

    head, got = await exchange(
        workdir, tls, test_ca, echo_body, posted, lambda got: got.endswith(PLACEHOLDER)
    )
    assert SECRET not in got


async def test_a_value_a_header_cannot_hold_is_a_400_and_in_no_log(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA, caplog: pytest.LogCaptureFixture
) -> None:
    """A credential whose value ends with a line break: before, the HTTP library
    refused the header with the value in its message, which the host logged."""
    broken = SECRET + b"\n"
    secret = PlaceholderSecret("vcrd_env", PLACEHOLDER, broken, HostSet(("api.test",)))
    path = workdir / "proxy.sock"
    caplog.set_level(logging.DEBUG)
    async with (
        https_origin(test_ca) as origin,
        proxy(path, tls, Secrets([], [secret]), "api.test"),
        await open_tunnel(path, "api.test", origin.port, tls) as stream,
    ):
        conn = h11.Connection(h11.CLIENT)
        status, data = await request(stream, conn, "GET", "/", "api.test", AUTH)
    assert status == 400 and b"cannot be put in this request's header" in data
    assert origin.seen == []
    assert SECRET.decode() not in caplog.text and SECRET not in data


class _Watched(Bodies):
    """``Bodies`` that says when the proxy holds the first body's 900 bytes."""

    def __init__(self, limit: int, held_limit: int) -> None:
        super().__init__(limit, held_limit)
        self.reached = anyio.Event()

    def take(self, size: int, host: str) -> None:
        super().take(size, host)
        if self.held >= 900:
            self.reached.set()


async def test_the_bodies_a_proxy_holds_at_once_are_bounded(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA
) -> None:
    """A body credentials are injected into is read whole: before, each of a
    sandbox's 256 connections could hold 8 MiB of the host's memory, 2 GiB in all."""
    path = workdir / "proxy.sock"
    secrets = Secrets([], [placeholder_secret("api.test")])
    head = b"POST / HTTP/1.1\r\nHost: api.test\r\nContent-Length: 1000\r\n\r\n"
    async with https_origin(test_ca) as origin, proxy(path, tls, secrets, "api.test") as running:
        running.bodies = watched = _Watched(1000, 1500)
        port = origin.port
        async with (
            await open_tunnel(path, "api.test", port, tls) as first,
            await open_tunnel(path, "api.test", port, tls) as second,
        ):
            await first.send(head + b"a" * 900)  # the rest later: held meanwhile
            with anyio.fail_after(WAIT):
                await watched.reached.wait()
            conn = h11.Connection(h11.CLIENT)
            crowded = await request(second, conn, "POST", "/", "api.test", body=b"b" * 700)
            assert crowded[0] == 503
            await first.send(b"a" * 100)
            answer = b""
            with anyio.fail_after(WAIT):
                while b"\r\n\r\n" not in answer:
                    answer += await first.receive()
            assert answer.startswith(b"HTTP/1.1 200") and running.bodies.held == 0
    assert [len(seen["body"]) for seen in origin.seen] == [1000]


def echoes(value: bytes) -> dict[str, bytes]:
    """How origins write ``value`` back (by name): JSON encoders' string escapes
    (Python's, PHP's with ``\\/``, Go's HTML-safe one, upper-case hex), URL
    encoders' (upper and lower case hex, ``+`` for a space), base64 of it
    alone or behind other bytes, and, for a ``Basic`` header value, the
    credentials, what they decode to and the password alone."""
    text = value.decode()
    compact = json.dumps(text, ensure_ascii=False)
    found = {
        "literal": text,
        "json": json.dumps(text),
        "json, slashes escaped": json.dumps(text).replace("/", "\\/"),
        "json, utf-8": compact,
        "json, html-safe": compact.replace("&", "\\u0026").replace("+", "\\u002b"),
        "json, upper-case hex": re.sub(r"\\u([0-9a-f]{4})", _upper, json.dumps(text)),
        "percent": quote(text, safe=""),
        "percent, lower-case hex": re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(text)),
        "form": quote_plus(text),
        "base64": base64.b64encode(value).decode(),
        "base64 url-safe, after one byte": base64.urlsafe_b64encode(b"x" + value).decode(),
        "base64, after two bytes": base64.b64encode(b"xy" + value).decode(),
        "base64 in json": json.dumps(base64.b64encode(b"x" + value).decode()).replace("/", "\\/"),
    }
    scheme, _, credentials = text.partition(" ")
    if scheme == "Basic":
        decoded = base64.b64decode(credentials).decode()
        password = decoded.partition(":")[2]
        found |= {
            "credentials": credentials,
            "credentials in json": json.dumps(credentials).replace("/", "\\/"),
            "credentials percent-encoded": quote(credentials, safe=""),
            "user and password": decoded,
            "password": password,
            "password in json": json.dumps(password),
            "password percent-encoded": quote(password, safe=""),
        }
    return {name: echo.encode() for name, echo in found.items()}


def _upper(match: re.Match[str]) -> str:
    return "\\u" + match[1].upper()


def secret_forms(value: bytes) -> list[bytes]:
    """What must never reach the sandbox: each way ``echoes`` writes ``value``
    (base64 behind other bytes: the part that depends on ``value`` alone)."""
    forms = [e for name, e in echoes(value).items() if "base64" not in name]
    return [*forms, *(base64.b64encode(pad + value)[4:-4] for pad in (b"", b"x", b"xy"))]


VAULT = 'v/"é+ &\\ 😀'.encode() + os.urandom(8).hex().encode()
"""A value whose every encoding differs from it."""


def repository_value(token: str) -> bytes:
    return b"Basic " + base64.b64encode(f"x-access-token:{token}".encode())


REPOSITORY = 'ghp_/"+?~?~?~' + os.urandom(8).hex()
"""A token with characters JSON and URLs escape; after ``x-access-token:``, its
``?`` and ``~`` put a ``/`` and a ``+`` (escaped too) in its Basic header value."""


@pytest.mark.parametrize("split", [False, True])
def test_an_echo_in_any_encoding_is_scrubbed_wherever_a_chunk_ends(split: bool) -> None:
    """Before, only the literal value was replaced: a JSON-escaped, percent-encoded
    or base64 echo, or the token out of a Basic header, reached the sandbox."""
    header = repository_value(REPOSITORY)
    rules = ScrubRules({VAULT: PLACEHOLDER, header: b"[repo hidden by stead]"})
    for value in (VAULT, header):
        for name, echo in echoes(value).items():
            answer = b"<" + echo + b">"
            cuts = range(len(answer) + 1) if split else [len(answer)]
            for cut in cuts:
                scrubber = Scrubber(rules)
                got = scrubber.feed(answer[:cut]) + scrubber.feed(answer[cut:]) + scrubber.flush()
                assert not [f for f in secret_forms(value) if f in got], (name, cut)
                assert got.startswith(b"<") and got.endswith(b">"), (name, cut)


def test_the_rules_for_a_set_of_values_are_made_once() -> None:
    """A long value makes many forms: each request's scrubber shares them."""
    secrets = Secrets([], [placeholder_secret("api.test")])
    first, second = secrets.for_host("api.test", 443), secrets.for_host("api.test", 443)
    assert first.rules is not None and first.rules is second.rules
    assert secrets.for_host("other.test", 443).rules is None


@pytest.mark.parametrize("status", [b"200 OK", b"101 Switching Protocols"])
async def test_a_header_named_after_the_secret_is_left_out(
    workdir: Path, tls: EgressTls, test_ca: trustme.CA, status: bytes
) -> None:
    """Before, only header values were scrubbed: an origin that echoed the value
    as a header's name (in capitals, which h11 lower-cases back into the value)
    sent it into the sandbox (after a 101 too: an origin may keep what an
    earlier request of the tunnel carried)."""

    def named(head: bytes) -> bytes:
        token = SECRET.upper()
        upgrade = b"upgrade: websocket\r\nconnection: upgrade\r\n" if b"101" in status else b""
        return (
            b"HTTP/1.1 "
            + status
            + b"\r\n"
            + upgrade
            + b"x-"
            + token
            + b": 1\r\nx-kept: yes\r\ncontent-length: 0\r\n\r\n"
        )

    upgrade = b"Upgrade: websocket\r\nConnection: Upgrade\r\n" if b"101" in status else b""
    sent = b"GET / HTTP/1.1\r\nHost: api.test\r\n" + upgrade + b"Authorization: Bearer "
    _, got = await exchange(workdir, tls, test_ca, named, sent + PLACEHOLDER + b"\r\n\r\n", _whole)
    assert got.startswith(b"HTTP/1.1 " + status) and b"x-kept: yes" in got.lower()
    assert SECRET not in got.lower()
