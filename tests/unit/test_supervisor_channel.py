"""The host's side of the supervisor's socket, fed by a stand-in for the
supervisor: what a sandbox says is untrusted, and exits are matched to spawns."""

from __future__ import annotations

import json
import marshal
import socket
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from stead.sandbox_host.supervisor_channel import SupervisorChannel

pytestmark = pytest.mark.anyio


class FakeSupervisor:
    """The sandbox's end of the socket, driven by the test."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def say(self, message: Any) -> None:
        self.sock.send(json.dumps(message).encode())

    def say_raw(self, data: bytes) -> None:
        self.sock.send(data)

    async def request(self) -> dict[str, Any]:
        await anyio.wait_readable(self.sock)
        message = marshal.loads(self.sock.recv(1 << 20))
        assert isinstance(message, dict)
        return message


@pytest.fixture
async def pair() -> AsyncIterator[tuple[SupervisorChannel, FakeSupervisor]]:
    host_end, sandbox_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    host_end.setblocking(False)
    sandbox_end.setblocking(False)
    channel = SupervisorChannel(host_end)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(channel.read_forever)
        yield channel, FakeSupervisor(sandbox_end)
        sandbox_end.close()
        with anyio.fail_after(5):
            await channel.closed.wait()
    host_end.close()


async def spawn(channel: SupervisorChannel, supervisor: FakeSupervisor, pid: int) -> None:
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(channel.request, {"op": "spawn", "argv": ["true"]})
        request = await supervisor.request()
        supervisor.say({"id": request["id"], "pid": pid})


async def settle() -> None:
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


async def test_an_exit_reaches_the_waiter_of_the_spawned_pid(
    pair: tuple[SupervisorChannel, FakeSupervisor],
) -> None:
    channel, supervisor = pair
    await spawn(channel, supervisor, 7)
    assert channel.exit_code(7) is None
    supervisor.say({"event": "exit", "pid": 7, "code": 3})
    with anyio.fail_after(5):
        assert await channel.wait_exit(7) == 3


async def test_exits_of_pids_never_spawned_are_ignored(
    pair: tuple[SupervisorChannel, FakeSupervisor],
) -> None:
    channel, supervisor = pair
    for pid in range(1000, 1100):
        supervisor.say({"event": "exit", "pid": pid, "code": 0})
    await settle()
    assert all(channel.exit_code(pid) is None for pid in range(1000, 1100))
    assert not channel._exits


async def test_a_reused_pid_does_not_inherit_the_previous_exit(
    pair: tuple[SupervisorChannel, FakeSupervisor],
) -> None:
    channel, supervisor = pair
    await spawn(channel, supervisor, 9)
    supervisor.say({"event": "exit", "pid": 9, "code": 1})
    with anyio.fail_after(5):
        assert await channel.wait_exit(9) == 1
    await spawn(channel, supervisor, 9)
    assert channel.exit_code(9) is None
    supervisor.say({"event": "exit", "pid": 9, "code": 0})
    with anyio.fail_after(5):
        assert await channel.wait_exit(9) == 0


async def test_malformed_messages_are_dropped_and_the_channel_keeps_working(
    pair: tuple[SupervisorChannel, FakeSupervisor],
) -> None:
    channel, supervisor = pair
    for junk in (b"\xff\xfe", b"[" * 100_000, b"42", b'"exit"'):
        supervisor.say_raw(junk)
    supervisor.say({"event": "exit", "pid": [1, 2]})
    supervisor.say({"event": "exit", "pid": {"a": 1}})
    supervisor.say({"event": "exit", "pid": True, "code": 0})
    supervisor.say({"id": 12345, "pid": 4})
    await settle()
    assert not channel.closed.is_set()
    await spawn(channel, supervisor, 4)
    supervisor.say({"event": "exit", "pid": 4, "code": "not a number"})
    with anyio.fail_after(5):
        assert await channel.wait_exit(4) == -9
