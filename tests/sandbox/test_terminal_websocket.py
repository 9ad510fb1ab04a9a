"""Terminals over stead serve's WebSocket (rule 10, DESIGN §5), with a real
sandbox host, a real ``stead serve`` and the ``stead.client.Terminal``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import struct
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
import websockets
from anyio.streams.memory import MemoryObjectSendStream

from stead.client import Output, Terminal, TerminalError
from stead.client.terminal import EXIT, STDOUT
from stead.sandbox import HostSandbox
from stead.testing import FakeModel, HostProcess, ServeForker, ServerProcess
from tests.conftest import STOPPED_WITHIN, loop_env, make_client
from tests.sandbox.conftest import (
    WAIT,
    client_of,
    config,
    plain_session,
    quiet,
    requires_isolation,
)

pytestmark = [pytest.mark.anyio, requires_isolation]


def terminal(gateway: ServerProcess, session_id: str, **options: Any) -> Terminal:
    assert gateway.first_key
    return Terminal(gateway.url, gateway.first_key, session_id, backoff_initial=0.05, **options)


async def read_until(outputs: AsyncIterator[Output], text: bytes) -> bytes:
    seen = b""
    with anyio.move_on_after(WAIT):
        async for item in outputs:
            seen += item.data
            if text in seen:
                return seen
    raise AssertionError(f"no {text!r} in {seen!r}")


async def test_an_exec_streams_both_channels_and_exits_once(
    gateway: ServerProcess, session_id: str
) -> None:
    assert gateway.first_key
    url = gateway.url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/sandbox/exec"
    command = "echo out; echo err >&2; exit 3"
    frames: list[bytes] = []
    query = urllib.parse.urlencode({"command": command})
    async with websockets.connect(
        f"{url}?{query}", additional_headers={"x-api-key": gateway.first_key}
    ) as socket:
        with anyio.fail_after(WAIT):
            async for message in socket:
                if isinstance(message, bytes) and message:
                    frames.append(message)
        assert socket.close_code == 1000
    assert b"".join(f[1:] for f in frames if f[0] == 1) == b"out\n"
    assert b"".join(f[1:] for f in frames if f[0] == 2) == b"err\n"
    assert [f for f in frames if f[0] == 4] == [b"\x04"]
    assert [f for f in frames if f[0] == 3] == [b"\x03" + struct.pack(">i", 3)]
    assert frames[-1][0] == 3


async def test_stdin_then_its_end_reach_an_exec(gateway: ServerProcess, session_id: str) -> None:
    async with terminal(gateway, session_id, kind="exec", command="wc -c") as term:
        await term.send(b"12345")
        await term.close_input()  # the channel byte alone
        got = b"".join([item.data async for item in term.output()])
    assert (got.strip(), term.exit_code) == (b"5", 0)


async def test_stead_exec_client_reports_the_exit_code(
    gateway: ServerProcess, session_id: str
) -> None:
    async with terminal(gateway, session_id, kind="exec", command="printf hi; exit 7") as term:
        got = b"".join([item.data async for item in term.output()])
    assert (got, term.exit_code) == (b"hi", 7)


async def test_an_exec_under_an_id_of_the_callers_choosing(
    gateway: ServerProcess, session_id: str
) -> None:
    """The client sent an id and no command, so a new exec it named was refused."""
    command = "printf chosen; exit 4"
    async with terminal(
        gateway, session_id, kind="exec", command=command, terminal_id="exec-mine"
    ) as term:
        got = b"".join([item.data async for item in term.output()])
    assert (got, term.exit_code) == (b"chosen", 4)
    async with terminal(gateway, session_id, kind="exec", terminal_id="exec-mine") as again:
        replayed = b"".join([item.data async for item in again.output()])
    assert (replayed, again.exit_code) == (b"chosen", 4)


async def test_a_pty_survives_the_server_being_killed(
    gateway: ServerProcess, session_id: str
) -> None:
    async with terminal(gateway, session_id) as term:
        outputs = term.output()
        await term.send(b"export KEPT=yes; echo pid=$$-$((1+1))\n")
        before = await read_until(outputs, b"-2\r\n")
        pid = before.split(b"pid=")[-1].split(b"-")[0]
        await term.send(b"sleep 1.5; echo $((3*4))-meanwhile\n")
        await read_until(outputs, b"$((3*4))-meanwhile")  # the shell has the line
        gateway.kill()
        await anyio.sleep(2.0)  # the line prints while no server runs
        gateway.start()
        seen = await read_until(outputs, b"12-meanwhile")
        await term.send(b"echo again=$$-$KEPT-$((2+2))\n")
        seen += await read_until(outputs, b"-4\r\n")
    assert term.redial_count >= 1
    assert seen.count(b"12-meanwhile") == 1  # delivered once across the redial
    assert f"again={pid.decode()}-yes-4".encode() in seen


class IdleProxy:
    """A TCP proxy that cuts a connection after ``idle`` seconds without a
    byte either way, as load balancers and NAT boxes do."""

    def __init__(self, target_port: int, idle: float) -> None:
        self.target_port = target_port
        self.idle = idle
        self.cuts = 0

    async def handle(self, client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", self.target_port) as upstream:
            last = [anyio.current_time()]

            async def pipe(source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream) -> None:
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    while True:
                        await sink.send(await source.receive())
                        last[0] = anyio.current_time()
                tasks.cancel_scope.cancel()  # closed by an end: not a cut

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(pipe, client, upstream)
                tasks.start_soon(pipe, upstream, client)
                while anyio.current_time() - last[0] < self.idle:  # noqa: ASYNC110 - a clock, not an event
                    await anyio.sleep(0.05)
                self.cuts += 1
                tasks.cancel_scope.cancel()


async def test_an_idle_pty_stays_open_and_keeps_the_sandbox_awake(
    gateway: ServerProcess, session_id: str, host: HostProcess
) -> None:
    proxy = IdleProxy(gateway.port, idle=1.0)
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    assert gateway.first_key
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(listener.serve, proxy.handle)
        term = Terminal(
            f"http://127.0.0.1:{port}", gateway.first_key, session_id, keepalive_seconds=0.3
        )
        await idle_then_type(term, session_id, host)
        tasks.cancel_scope.cancel()
    await listener.aclose()
    assert proxy.cuts == 0


async def idle_then_type(term: Terminal, session_id: str, host: HostProcess) -> None:
    async with term:
        outputs = term.output()
        await term.send(b"echo $((5*5))-first\n")
        await read_until(outputs, b"25-first")
        await anyio.sleep(3.0)  # many keepalives and idle checks pass
        status = host.call({"op": "status", "sandbox_id": session_id})["result"]
        assert status["state"] == "active"
        await term.send(b"echo $((6*6))-after\n")
        await read_until(outputs, b"36-after")
    assert term.redial_count == 0


async def test_a_sleeping_sandbox_wakes_for_a_terminal(
    gateway: ServerProcess, session_id: str, host: HostProcess
) -> None:
    client = client_of(host)
    sandbox = HostSandbox(client, session_id, config())
    await sandbox.write_file("left-behind", b"still here")
    assert await sandbox.sleep()
    await client.aclose()
    async with terminal(gateway, session_id, kind="exec", command="cat left-behind") as term:
        got = b"".join([item.data async for item in term.output()])
    assert got == b"still here"


async def test_a_bad_key_is_refused_not_redialled(gateway: ServerProcess, session_id: str) -> None:
    term = Terminal(gateway.url, "sk-stead-wrong", session_id)
    with pytest.raises(TerminalError, match="refused"):
        async with term:
            pass


async def test_the_flap_breaker_gives_up_on_a_line_that_keeps_dropping() -> None:
    async def flapping(socket: Any) -> None:
        await socket.send(json.dumps({"type": "attached", "id": "pty_x", "kind": "pty"}))
        await socket.close(1011, "broken")

    async with websockets.serve(flapping, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        term = Terminal(f"http://127.0.0.1:{port}", "key", "sesn_x", backoff_initial=0.01)
        async with term:
            with pytest.raises(TerminalError, match="keeps dropping"):
                async for _ in term.output():
                    pass
    assert term.redial_count == 3


async def test_a_client_dropped_as_too_slow_redials_and_resumes_where_output_goes_on() -> None:
    offsets: list[str] = []

    async def serve(socket: Any) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(socket.request.path).query)
        offsets.append(query["offset"][0])
        await socket.send(json.dumps({"type": "attached", "id": "exec_x", "kind": "exec"}))
        if len(offsets) == 1:
            await socket.send(json.dumps({"type": "offset", "offset": 0}))
            await socket.send(bytes([STDOUT]) + b"abc")
            await socket.close(4408, "fell behind the scrollback")
            return
        # The scrollback lost bytes 3-9 meanwhile: output resumes at 10.
        await socket.send(json.dumps({"type": "offset", "offset": 10}))
        await socket.send(bytes([STDOUT]) + b"xyz")
        await socket.send(bytes([EXIT]) + struct.pack(">i", 0))
        await socket.close(1000, "exited")

    async with websockets.serve(serve, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        term = Terminal(
            f"http://127.0.0.1:{port}", "key", "sesn_x", kind="exec", command="x",
            backoff_initial=0.01,
        )  # fmt: skip
        async with term:
            got = b"".join([item.data async for item in term.output()])
    assert got == b"abcxyz"
    assert offsets == ["0", "3"]
    assert (term.exit_code, term.redial_count, term.skipped_bytes) == (0, 1, 7)


async def test_two_clients_on_one_pty_and_two_ptys_apart(
    gateway: ServerProcess, session_id: str
) -> None:
    async with terminal(gateway, session_id) as first, terminal(gateway, session_id) as other:  # noqa: SIM117 - the watcher needs the id
        async with terminal(gateway, session_id, terminal_id=first.terminal_id) as watcher:
            mine, theirs, watched = first.output(), other.output(), watcher.output()
            await first.send(b"export ONLY=first; echo $((2*21))-$ONLY\n")
            await read_until(mine, b"42-first")
            await read_until(watched, b"42-first")  # a second client sees it all
            await other.send(b"echo [$ONLY]-$((3*3))\n")
            assert b"[]-9" in await read_until(theirs, b"-9")  # another PTY: its own shell


async def test_bad_terminal_requests_close_with_a_reason_and_no_server_error(
    gateway: ServerProcess, session_id: str
) -> None:
    """A bad offset, a binary first frame for an exec's command, a client gone
    before its command: a 4400 (or nothing, for the one that left), never an
    unhandled error in the server; and a self-hosted session has no sandbox."""
    assert gateway.first_key
    base = gateway.url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/sandbox"
    headers = {"x-api-key": gateway.first_key}
    before = len(gateway.log_text())

    async def closed(url: str, first: bytes | None = None) -> tuple[int | None, str]:
        async with websockets.connect(url, additional_headers=headers) as socket:
            if first is not None:
                await socket.send(first)
            with anyio.fail_after(WAIT):
                with contextlib.suppress(websockets.ConnectionClosed):
                    while True:
                        await socket.recv()
            return socket.close_code, socket.close_reason

    for offset in ("-1", str(10**30)):
        code, reason = await closed(f"{base}/pty?offset={offset}")
        assert code == 4400 and "offset" in reason
    code, reason = await closed(f"{base}/exec", first=b"\x00ls")
    assert code == 4400 and "command" in reason
    async with websockets.connect(f"{base}/exec", additional_headers=headers):
        pass  # gone before sending its command
    with make_client(gateway.url, gateway.first_key) as client:
        agent = client.beta.agents.create(name="t", model="claude-sonnet-4-6")
        environment = client.beta.environments.create(
            name=f"workers-{uuid.uuid4().hex[:8]}", config={"type": "self_hosted"}
        )
        on_workers = client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    url = gateway.url.replace("http", "ws", 1) + f"/v1/sessions/{on_workers.id}/sandbox/pty"
    code, reason = await closed(url)
    assert code == 4503 and "self_hosted" in reason
    await anyio.sleep(0.2)  # the server's handling of the one that left
    assert "Traceback" not in gateway.log_text()[before:]


async def test_a_server_stopped_under_streaming_terminals_stops_at_once_and_quietly(
    host: HostProcess, tmp_path: Path, forker: ServeForker
) -> None:
    """uvicorn closes every WebSocket when the server stops; a relay whose
    send then failed was an ERROR with a traceback in the log."""
    with FakeModel(quiet) as fake:
        env = loop_env(fake, **host.settings_env)
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            assert server.first_key
            session_id = plain_session(server)
            url = server.url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/sandbox/exec"
            headers = {"x-api-key": server.first_key}
            async with contextlib.AsyncExitStack() as stack:
                for _ in range(4):
                    socket = await stack.enter_async_context(
                        # Its reading paused by the flood, a client sees the close
                        # only once its own close handshake times out.
                        websockets.connect(
                            f"{url}?command=yes", additional_headers=headers, close_timeout=0.1
                        )
                    )
                    with anyio.fail_after(WAIT):
                        while not isinstance(await socket.recv(), bytes):
                            pass  # the output flows
                os.kill(server.pid, signal.SIGTERM)
                stopped = await anyio.to_thread.run_sync(server.wait_exit, STOPPED_WITHIN)
                assert stopped, "the server did not stop by itself"
        finally:
            server.kill()
    log = server.log_text()
    # Every relay ended when uvicorn closed its socket: none was left for
    # uvicorn to cancel at its graceful limit.
    assert "graceful shutdown exceeded" not in log
    assert "Traceback" not in log


async def test_bad_control_messages_are_answered_and_the_terminal_goes_on(
    gateway: ServerProcess, session_id: str
) -> None:
    assert gateway.first_key
    url = gateway.url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/sandbox/pty"
    before = len(gateway.log_text())
    bad = [
        {"type": "resize", "rows": True, "cols": 80},
        {"type": "resize", "rows": 24, "cols": False},
        {"type": "resize", "rows": 10**30, "cols": 80},
        {"type": "resize", "rows": -1, "cols": 80},
        {"type": "resize", "rows": 1.5, "cols": 80},
    ]
    async with websockets.connect(url, additional_headers={"x-api-key": gateway.first_key}) as s:
        for control in bad:
            await s.send(json.dumps(control))
        await s.send(b"\x00echo $((6*7))-alive\n")
        errors, seen = 0, b""
        with anyio.fail_after(WAIT):
            while b"42-alive" not in seen:
                message = await s.recv()
                if isinstance(message, str):
                    errors += json.loads(message)["type"] == "error"
                elif message[:1] == bytes([STDOUT]):
                    seen += message[1:]
    assert errors == len(bad)
    assert "Traceback" not in gateway.log_text()[before:]


LEASE_TTL = 1.5
"""A sandbox lease's TTL in the lease tests: renewed every half second."""


@contextlib.contextmanager
def short_lease_server(
    host: HostProcess, tmp_path: Path, forker: ServeForker
) -> Iterator[ServerProcess]:
    """A server whose sandbox leases last ``LEASE_TTL`` and whose sweeper
    destroys an expired one's sandbox within a tenth of a second."""
    with FakeModel(quiet) as fake:
        env = loop_env(
            fake,
            STEAD_SANDBOX_LEASE_SECONDS=str(LEASE_TTL),
            STEAD_SANDBOX_SWEEP_INTERVAL_SECONDS="0.1",
            **host.settings_env,
        )
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            yield server
        finally:
            server.stop()


async def test_an_attached_terminal_renews_its_sandbox_lease(
    host: HostProcess, tmp_path: Path, forker: ServeForker
) -> None:
    """A terminal renewed the lease only when it attached: one left open
    longer than the TTL had its sandbox destroyed under it by the sweeper."""
    with short_lease_server(host, tmp_path, forker) as server:
        assert server.first_key
        session_id = plain_session(server)
        async with terminal(server, session_id, flap_limit=0) as term:
            outputs = term.output()
            await term.send(b"echo pid=$$-$((2*3))\n")
            pid = (await read_until(outputs, b"-6\r\n")).split(b"pid=")[-1].split(b"-")[0]
            with make_client(server.url, server.first_key) as client:
                path = f"/v1/sessions/{session_id}/sandbox"
                with anyio.fail_after(WAIT):
                    while True:  # until the sandbox outlived its TTL twice over
                        view: Any = client.get(path, cast_to=object)
                        assert view["lease"]["status"] == "active", view["lease"]
                        if view["active_seconds"] > 2 * LEASE_TTL:
                            break
                        await anyio.sleep(0.1)
            await term.send(b"echo again=$$-$((3*3))\n")
            seen = await read_until(outputs, b"-9\r\n")
        assert f"again={pid.decode()}-9".encode() in seen
        assert term.redial_count == 0


async def test_a_terminal_keeps_its_sandbox_lease_while_it_opens(
    host: HostProcess, tmp_path: Path, forker: ServeForker
) -> None:
    """A terminal's open renewed the lease once, as it began: staging and the
    wake that took longer than the TTL (a loaded host) had the sweeper destroy
    the sandbox under it, and the terminal failed ('sandbox is being
    destroyed'). Here the host is stopped (SIGSTOP) while a terminal opens,
    until its lease was renewed past two TTLs, or expired."""
    with short_lease_server(host, tmp_path, forker) as server:
        assert server.first_key
        opened_first, opening = plain_session(server), plain_session(server)
        # A terminal kept open in another session leaves the server's host
        # connections pooled: the stopped host holds the open's calls on them,
        # rather than on a new connection's hello, which would time out.
        async with terminal(server, opened_first, flap_limit=0) as kept:
            await kept.send(b"echo $((4*5))-up\n")
            await read_until(kept.output(), b"20-up")
            os.kill(host.pid, signal.SIGSTOP)
            try:
                async with anyio.create_task_group() as tasks:
                    send, attached = anyio.create_memory_object_stream[bytes](1)
                    tasks.start_soon(open_pty, server, opening, send)
                    with attached:
                        await held_open(server, opening)
                        os.kill(host.pid, signal.SIGCONT)
                        with anyio.fail_after(WAIT):
                            assert b"pid=" in await attached.receive()
            finally:
                os.kill(host.pid, signal.SIGCONT)


async def held_open(server: ServerProcess, session_id: str) -> None:
    """Returns once the session's lease was renewed past two TTLs after the
    one its terminal's open took; fails if it ended instead."""
    with anyio.fail_after(WAIT):
        while (lease := lease_of(server, session_id)) is None:  # noqa: ASYNC110
            await anyio.sleep(0.05)
        taken_until = lease[1]
        while lease[1] < taken_until + 2 * LEASE_TTL:
            assert lease[0] == "active", f"the lease ended while the terminal opened: {lease}"
            await anyio.sleep(0.05)
            lease = lease_of(server, session_id) or ("gone", 0.0)


async def open_pty(
    server: ServerProcess, session_id: str, send: MemoryObjectSendStream[bytes]
) -> None:
    """Opens a pty of the session (its WebSocket, without the client's own
    attach timeout), runs one command in it and sends what it printed."""
    assert server.first_key
    url = server.url.replace("http", "ws", 1) + f"/v1/sessions/{session_id}/sandbox/pty"
    headers = {"x-api-key": server.first_key}
    with send:
        async with websockets.connect(url, additional_headers=headers) as socket:
            hello = json.loads(await socket.recv())
            assert hello["type"] == "attached", hello
            await socket.send(b"\x00echo pid=$$-$((7*8))\n")
            seen = b""
            while b"-56" not in seen:
                message = await socket.recv()
                if isinstance(message, bytes) and message[:1] == bytes([STDOUT]):
                    seen += message[1:]
        await send.send(seen)


def lease_of(server: ServerProcess, session_id: str) -> tuple[str, float] | None:
    """The session's sandbox lease as the server's database holds it: its
    status and when it expires (seconds since the epoch)."""
    path = server.data_dir / "stead.db"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        row = db.execute(
            "SELECT status, expires_at FROM sandbox_leases WHERE sandbox_id=?", (session_id,)
        ).fetchone()
    if row is None:
        return None
    # SQLite holds the time as naive UTC text.
    return str(row[0]), datetime.fromisoformat(row[1]).replace(tzinfo=UTC).timestamp()
