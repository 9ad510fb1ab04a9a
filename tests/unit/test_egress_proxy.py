"""EgressProxy over real sockets: CONNECT tunnels, forwarded http:// requests, the
policy and blocklist, and an untrusted client. Every origin listens on 127.0.0.1 and
names resolve through a fake resolver, so nothing leaves the machine."""

from __future__ import annotations

import json
import os
import socket
import stat
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import h11
import pytest
from anyio.abc import SocketStream

from stead.egress_policy import EgressPolicy, threaded_resolver
from stead.sandbox_host.egress import EgressProxy
from stead.sandbox_host.egress.proxy import LOOKUPS

pytestmark = pytest.mark.anyio

WAIT = 10.0
"""Longest a test waits for anything it caused."""

UNRESTRICTED: dict[str, Any] = {"type": "unrestricted"}


def limited(*hosts: str) -> EgressPolicy:
    return EgressPolicy(
        {
            "type": "limited",
            "allowed_hosts": list(hosts),
            "allow_mcp_servers": False,
            "allow_package_managers": False,
        }
    )


class FakeResolver:
    """Resolves the names it was given; any other name does not exist."""

    def __init__(self, names: dict[str, list[str]] | None = None) -> None:
        self.names = names or {}
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        await anyio.lowlevel.checkpoint()
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.names[host]


async def hanging_resolver(host: str, port: int) -> Sequence[str]:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@pytest.fixture
def sock_path() -> Iterator[Path]:
    # AF_UNIX paths are limited to 107 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="egress-", dir="/tmp") as directory:
        yield Path(directory) / "proxy.sock"


@asynccontextmanager
async def serving(handler: Callable[[SocketStream], Any]) -> AsyncIterator[int]:
    """A loopback TCP server running ``handler`` per connection; yields its port."""
    async with (
        await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as listener,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(listener.serve, handler)
        yield listener.extra(anyio.abc.SocketAttribute.local_port)
        tasks.cancel_scope.cancel()


async def echo(stream: SocketStream) -> None:
    async with stream:
        try:
            async for chunk in stream:
                await stream.send(chunk)
        except anyio.BrokenResourceError:
            pass


async def origin(stream: SocketStream) -> None:
    """Answers one request with JSON describing what it received."""
    conn = h11.Connection(h11.SERVER)
    async with stream:
        request: h11.Request | None = None
        body = b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive())
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
        assert request is not None
        seen = {
            "method": request.method.decode(),
            "target": request.target.decode(),
            "headers": [[n.decode(), v.decode()] for n, v in request.headers],
            "body": body.decode(),
        }
        data = json.dumps(seen).encode()
        await stream.send(
            conn.send(h11.Response(status_code=200, headers=[("content-length", str(len(data)))]))
            or b""
        )
        await stream.send(conn.send(h11.Data(data=data)) or b"")
        await stream.send(conn.send(h11.EndOfMessage()) or b"")


async def hang_up(stream: SocketStream) -> None:
    await stream.aclose()


async def never_answer(stream: SocketStream) -> None:
    async with stream:
        await anyio.sleep_forever()


@asynccontextmanager
async def running(
    path: Path, policy: EgressPolicy, *, resolver: Any = None, **options: Any
) -> AsyncIterator[EgressProxy]:
    options.setdefault("connect_timeout", WAIT)
    options.setdefault("idle_timeout", WAIT)
    async with EgressProxy(path, policy, resolver=resolver or FakeResolver(), **options) as proxy:
        yield proxy


async def read_head(stream: SocketStream) -> tuple[int, bytes]:
    """(status, bytes after the head) of the response on ``stream``."""
    data = b""
    with anyio.fail_after(WAIT):
        while b"\r\n\r\n" not in data:
            data += await stream.receive()
    head, rest = data.split(b"\r\n\r\n", 1)
    return int(head.split(b" ", 2)[1]), rest


async def read_to_end(stream: SocketStream) -> bytes:
    data = b""
    with anyio.fail_after(WAIT):
        try:
            async for chunk in stream:
                data += chunk
        except anyio.BrokenResourceError:
            pass  # a peer that closes with our bytes unread resets the connection
    return data


async def ask(path: Path, request: bytes) -> tuple[int, bytes]:
    """Sends ``request`` and reads the whole response: (status, body)."""
    async with await anyio.connect_unix(path) as stream:
        await stream.send(request)
        response = await read_to_end(stream)
    head, body = response.split(b"\r\n\r\n", 1)
    return int(head.split(b" ", 2)[1]), body


@asynccontextmanager
async def tunnel(path: Path, authority: str, early: bytes = b"") -> AsyncIterator[SocketStream]:
    async with await anyio.connect_unix(path) as stream:
        await stream.send(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        if early:
            await stream.send(early)
        status, rest = await read_head(stream)
        assert (status, rest) == (200, b"")
        yield stream


async def exchange(stream: SocketStream, data: bytes) -> bytes:
    await stream.send(data)
    got = b""
    with anyio.fail_after(WAIT):
        while len(got) < len(data):
            got += await stream.receive()
    return got


async def eventually(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(WAIT):
        while not condition():  # noqa: ASYNC110 - a counter has nothing to wait on
            await anyio.sleep(0.005)


def connect(authority: str) -> bytes:
    return f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()


# --- CONNECT and the policy -------------------------------------------------------


async def test_connect_to_an_explicitly_listed_loopback_server(sock_path: Path) -> None:
    async with serving(echo) as port, running(sock_path, limited("127.0.0.1")) as proxy:
        async with tunnel(sock_path, f"127.0.0.1:{port}") as stream:
            assert proxy.active_connections == 1
            assert await exchange(stream, b"hello") == b"hello"
            assert await exchange(stream, b"x" * 200_000) == b"x" * 200_000
        assert (proxy.allowed, proxy.denied) == (1, 0)
        await eventually(lambda: proxy.active_connections == 0)


async def test_a_listed_name_reaches_its_private_address(sock_path: Path) -> None:
    # The name is matched normalised but resolved as the client spelled it.
    resolver = FakeResolver({"db.internal.": ["127.0.0.1"]})
    async with (
        serving(echo) as port,
        running(sock_path, limited("DB.Internal"), resolver=resolver),
        tunnel(sock_path, f"db.internal.:{port}") as stream,
    ):
        assert await exchange(stream, b"ping") == b"ping"
    assert resolver.calls == ["db.internal."]


async def test_unrestricted_still_refuses_loopback(sock_path: Path) -> None:
    resolver = FakeResolver({"sneaky.example": ["127.0.0.1"]})
    policy = EgressPolicy(UNRESTRICTED)
    async with serving(echo) as port, running(sock_path, policy, resolver=resolver) as proxy:
        status, body = await ask(sock_path, connect(f"127.0.0.1:{port}"))
        assert status == 403
        assert b"127.0.0.1" in body and b"address 127.0.0.1 is blocked" in body
        status, body = await ask(sock_path, connect(f"sneaky.example:{port}"))
        assert status == 403
        assert body.startswith(b"egress to sneaky.example denied: address 127.0.0.1 is blocked")
        assert (proxy.allowed, proxy.denied) == (0, 2)


async def test_limited_refuses_an_unlisted_host_without_resolving_it(sock_path: Path) -> None:
    resolver = FakeResolver({"other.example": ["127.0.0.1"]})
    async with (
        serving(echo) as port,
        running(sock_path, limited("api.example"), resolver=resolver) as proxy,
    ):
        status, body = await ask(sock_path, connect(f"other.example:{port}"))
        assert status == 403
        assert (
            body == b"egress to other.example denied: host not in the environment's allowed_hosts\n"
        )
        status, _ = await ask(sock_path, connect(f"127.0.0.1:{port}"))
        assert status == 403
        assert proxy.denied == 2
    assert resolver.calls == []


async def test_a_wildcard_admits_subdomains_but_not_their_private_addresses(
    sock_path: Path,
) -> None:
    resolver = FakeResolver({"API.svc.test": ["127.0.0.1"], "svc.test": ["127.0.0.1"]})
    async with serving(echo) as port, running(sock_path, limited("*.svc.test"), resolver=resolver):
        _, body = await ask(sock_path, connect(f"API.svc.test:{port}"))
        assert b"address 127.0.0.1 is blocked" in body  # matched, then the blocklist
        _, body = await ask(sock_path, connect(f"svc.test:{port}"))
        assert b"host not in the environment's allowed_hosts" in body  # the apex is not
    assert resolver.calls == ["API.svc.test"]


async def test_an_unresolvable_host_is_a_502(sock_path: Path) -> None:
    async with running(sock_path, EgressPolicy(UNRESTRICTED)) as proxy:
        status, body = await ask(sock_path, connect("nowhere.invalid:443"))
        assert status == 502
        assert b"nowhere.invalid: cannot resolve the host" in body
        assert proxy.denied == 0


async def test_a_resolver_that_hangs_is_a_504(sock_path: Path) -> None:
    async with running(
        sock_path, EgressPolicy(UNRESTRICTED), resolver=hanging_resolver, connect_timeout=0.1
    ):
        status, body = await ask(sock_path, connect("slow.example:443"))
    assert status == 504
    assert b"timed out" in body


async def test_lookups_that_never_answer_hold_only_their_own_proxy(sock_path: Path) -> None:
    """Each proxy resolves on threads of its own, at most ``LOOKUPS`` at once.
    Before, every proxy used the event loop's four resolver threads, and one
    sandbox's eight names whose DNS server never answers made every other
    sandbox's lookups time out."""
    never = threading.Event()  # the DNS server of the slow names: it never answers

    def lookup(host: str, port: int) -> list[tuple[Any, ...]]:
        if host.startswith("slow"):
            never.wait(WAIT)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    other = sock_path.with_name("other.sock")
    policy = EgressPolicy(UNRESTRICTED)
    slow = threaded_resolver(anyio.CapacityLimiter(LOOKUPS), lookup)
    fast = threaded_resolver(anyio.CapacityLimiter(LOOKUPS), lookup)
    try:
        async with (
            running(sock_path, policy, resolver=slow, connect_timeout=0.5),
            running(other, policy, resolver=fast),
            anyio.create_task_group() as asking,
        ):
            answers: list[int] = []

            async def slow_name(i: int) -> None:
                answers.append((await ask(sock_path, connect(f"slow{i}.test:443")))[0])

            for i in range(2 * LOOKUPS):
                asking.start_soon(slow_name, i)
            status, body = await ask(other, connect("fast.test:443"))
            assert status == 403 and b"address 127.0.0.1 is blocked" in body  # resolved
        assert answers == [504] * (2 * LOOKUPS)
    finally:
        never.set()


async def test_a_refused_connection_is_a_502(sock_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    async with running(sock_path, limited("127.0.0.1")):
        status, body = await ask(sock_path, connect(f"127.0.0.1:{closed_port}"))
    assert status == 502
    assert b"cannot connect" in body


async def test_bytes_sent_behind_the_connect_head_reach_the_origin(sock_path: Path) -> None:
    async with (
        serving(echo) as port,
        running(sock_path, limited("127.0.0.1")),
        tunnel(sock_path, f"127.0.0.1:{port}", early=b"early") as stream,
    ):
        assert await exchange(stream, b"") == b""
        with anyio.fail_after(WAIT):
            assert await stream.receive() == b"early"


async def test_a_half_close_is_passed_on_and_the_answer_still_arrives(sock_path: Path) -> None:
    async with (
        serving(echo) as port,
        running(sock_path, limited("127.0.0.1")),
        tunnel(sock_path, f"127.0.0.1:{port}") as stream,
    ):
        await stream.send(b"last words")
        await stream.send_eof()
        assert await read_to_end(stream) == b"last words"


async def test_an_idle_tunnel_is_closed(sock_path: Path) -> None:
    async with (
        serving(echo) as port,
        running(sock_path, limited("127.0.0.1"), idle_timeout=0.2) as proxy,
        tunnel(sock_path, f"127.0.0.1:{port}") as stream,
    ):
        assert await read_to_end(stream) == b""
        await eventually(lambda: proxy.active_connections == 0)


async def test_closing_the_proxy_closes_open_tunnels_and_unlinks_the_socket(
    sock_path: Path,
) -> None:
    async with (
        serving(echo) as port,
        running(sock_path, limited("127.0.0.1")) as proxy,
        tunnel(sock_path, f"127.0.0.1:{port}") as stream,
    ):
        assert await exchange(stream, b"hi") == b"hi"
        await proxy.__aexit__(None, None, None)
        assert await read_to_end(stream) == b""
        assert not os.path.exists(sock_path)  # noqa: ASYNC240


async def test_a_replaced_policy_applies_to_the_next_request(sock_path: Path) -> None:
    async with serving(echo) as port, running(sock_path, limited()) as proxy:
        assert (await ask(sock_path, connect(f"127.0.0.1:{port}")))[0] == 403
        proxy.policy = limited("127.0.0.1")
        async with tunnel(sock_path, f"127.0.0.1:{port}") as stream:
            assert await exchange(stream, b"ok") == b"ok"


# --- plain http:// requests -------------------------------------------------------


async def test_a_plain_get_is_forwarded_in_origin_form_without_hop_headers(
    sock_path: Path,
) -> None:
    async with serving(origin) as port, running(sock_path, limited("127.0.0.1")) as proxy:
        status, body = await ask(
            sock_path,
            f"GET http://127.0.0.1:{port}/path?x=1 HTTP/1.1\r\n"
            "Host: elsewhere.example\r\n"
            "Proxy-Connection: keep-alive\r\n"
            "Proxy-Authorization: Basic c2VjcmV0\r\n"
            "Keep-Alive: timeout=5\r\n"
            "Connection: keep-alive, X-Hop\r\n"
            "X-Hop: 1\r\n"
            "X-Kept: 2\r\n\r\n".encode(),
        )
        assert proxy.allowed == 1
    assert status == 200
    seen = json.loads(body)
    assert (seen["method"], seen["target"]) == ("GET", "/path?x=1")
    assert seen["headers"] == [
        ["host", f"127.0.0.1:{port}"],
        ["x-kept", "2"],
        ["connection", "close"],
    ]


async def test_request_bodies_are_streamed_whatever_their_framing(sock_path: Path) -> None:
    async with serving(origin) as port, running(sock_path, limited("127.0.0.1")):
        url = f"http://127.0.0.1:{port}"
        status, body = await ask(
            sock_path,
            f"POST {url}/a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello".encode(),
        )
        assert (status, json.loads(body)["body"]) == (200, "hello")
        status, body = await ask(
            sock_path,
            f"PUT {url} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".encode(),
        )
        assert status == 200
        assert (json.loads(body)["target"], json.loads(body)["body"]) == ("/", "abcde")


async def test_expect_100_continue_is_answered_by_the_proxy(sock_path: Path) -> None:
    async with (
        serving(origin) as port,
        running(sock_path, limited("127.0.0.1")),
        await anyio.connect_unix(sock_path) as stream,
    ):
        await stream.send(
            f"POST http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n"
            "Expect: 100-continue\r\nContent-Length: 4\r\n\r\n".encode()
        )
        assert (await read_head(stream)) == (100, b"")
        await stream.send(b"data")
        response = await read_to_end(stream)
    assert response.startswith(b"HTTP/1.1 200 ")
    seen = json.loads(response.split(b"\r\n\r\n", 1)[1])
    assert seen["body"] == "data"
    assert "expect" not in {name for name, _ in seen["headers"]}


async def test_a_plain_request_to_a_denied_host_is_a_403(sock_path: Path) -> None:
    async with serving(origin) as port, running(sock_path, EgressPolicy(UNRESTRICTED)):
        status, body = await ask(
            sock_path, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
    assert status == 403
    assert b"address 127.0.0.1 is blocked" in body


async def test_an_origin_that_hangs_up_is_a_502(sock_path: Path) -> None:
    async with serving(hang_up) as port, running(sock_path, limited("127.0.0.1")):
        status, body = await ask(
            sock_path, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
    assert status == 502
    assert body.startswith(f"127.0.0.1:{port}: the origin".encode())


async def test_an_origin_that_never_answers_is_a_504(sock_path: Path) -> None:
    async with (
        serving(never_answer) as port,
        running(sock_path, limited("127.0.0.1"), idle_timeout=0.2),
    ):
        status, body = await ask(
            sock_path, f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
    assert status == 504
    assert b"did not answer in time" in body


# --- an untrusted client ----------------------------------------------------------


@pytest.mark.parametrize(
    "request_head",
    [
        b"hello there\r\n\r\n",
        b"GET /relative HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"GET http://user@example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"CONNECT example.com:99999 HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"CONNECT [::1 HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"CONNECT exa\xffmple.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"CONNECT a/b:443 HTTP/1.1\r\nHost: example.com\r\n\r\n",
    ],
)
async def test_malformed_requests_are_400(sock_path: Path, request_head: bytes) -> None:
    resolver = FakeResolver()
    async with running(sock_path, EgressPolicy(UNRESTRICTED), resolver=resolver) as proxy:
        status, _ = await ask(sock_path, request_head)
        assert (status, proxy.allowed, proxy.denied) == (400, 0, 0)
    assert resolver.calls == []


async def test_a_header_flood_is_refused_and_closed(sock_path: Path) -> None:
    async with running(sock_path, EgressPolicy(UNRESTRICTED)) as proxy:
        flood = b"GET http://example.com/ HTTP/1.1\r\nX-Flood: " + b"a" * 100_000
        status, _ = await ask(sock_path, flood)
        assert status == 431
        await eventually(lambda: proxy.active_connections == 0)


async def test_a_slow_head_is_closed_by_the_head_timeout(sock_path: Path) -> None:
    async with running(sock_path, EgressPolicy(UNRESTRICTED), head_timeout=0.3) as proxy:
        async with await anyio.connect_unix(sock_path) as stream:
            # One byte at a time never completes the head; the limit is on the
            # whole head, not on each read.
            with anyio.fail_after(WAIT):
                try:
                    for byte in b"CONNECT example.com:443 HTTP/1.1\r\n" + b"X: y\r\n" * 10_000:
                        await stream.send(bytes([byte]))
                        await anyio.sleep(0.01)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    pass
            assert (await read_to_end(stream)).startswith(b"HTTP/1.1 408 ")
        await eventually(lambda: proxy.active_connections == 0)


async def test_connections_beyond_the_limit_are_turned_away(sock_path: Path) -> None:
    async with running(sock_path, EgressPolicy(UNRESTRICTED), max_connections=2) as proxy:
        async with (
            await anyio.connect_unix(sock_path) as first,
            await anyio.connect_unix(sock_path) as second,
        ):
            await eventually(lambda: proxy.active_connections == 2)
            status, body = await ask(sock_path, b"")
            assert (status, body) == (503, b"too many connections\n")
            assert proxy.active_connections == 2
            del first, second
        await eventually(lambda: proxy.active_connections == 0)
        assert (await ask(sock_path, connect("nowhere.invalid:1")))[0] == 502


async def test_the_socket_is_world_writable_and_a_stale_one_is_replaced(
    sock_path: Path,
) -> None:
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(os.fspath(sock_path))
    stale.close()  # a dead host leaves its socket file behind
    async with running(sock_path, EgressPolicy(UNRESTRICTED)):
        assert stat.S_IMODE(os.stat(sock_path).st_mode) == 0o666
        assert (await ask(sock_path, connect("nowhere.invalid:1")))[0] == 502
