"""The bus between processes, on an in-memory channel and on PostgreSQL's LISTEN/NOTIFY.

Two ``SharedBus`` on one store stand for two processes: a reader of one gets
the events the other publishes (read from the store: notices carry no bodies),
wake-ups reach the other's peers, a lost notice is healed by the slow poll, a
malformed one is ignored.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest
from anyio.abc import TaskStatus

from stead.runtime import SessionFeed, SharedBus
from stead.store import ChannelDown, SqlStore, open_channel
from tests.databases import BACKENDS
from tests.unit.conftest import collect_feed, new_session, user_message

pytestmark = pytest.mark.anyio


class Wire:
    """Channels that hear each other; ``lose`` drops whatever is sent meanwhile."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[str], None]] = []
        self.lose = False
        self.down = False
        self.refused = anyio.Event()
        """Set when a send was refused while down."""

    def channel(self) -> MemoryChannel:
        return MemoryChannel(self)


class MemoryChannel:
    def __init__(self, wire: Wire) -> None:
        self._wire = wire

    async def send(self, notices: Sequence[str]) -> None:
        if self._wire.down:
            self._wire.refused.set()
            raise ChannelDown("the wire is down")
        if not self._wire.lose:
            for listener in list(self._wire.listeners):
                for notice in notices:
                    listener(notice)

    async def listen(
        self,
        received: Callable[[str], None],
        reconnected: Callable[[], None],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        self._wire.listeners.append(received)
        try:
            task_status.started()
            await anyio.sleep_forever()
        finally:
            self._wire.listeners.remove(received)

    async def aclose(self) -> None:
        pass


class Peers:
    def __init__(self) -> None:
        self.woken: list[str] = []
        self.interrupted: list[str] = []
        self.vaults: list[str] = []
        self.destroyed: list[str] = []
        self.restaged: list[str] = []
        self.called = anyio.Event()

    def wake(self, session_id: str) -> None:
        self.woken.append(session_id)
        self.called.set()

    def interrupt(self, session_id: str) -> None:
        self.interrupted.append(session_id)
        self.called.set()

    def credentials_changed(self, vault_id: str) -> None:
        self.vaults.append(vault_id)
        self.called.set()

    def sandbox_destroyed(self, sandbox_id: str, incarnation: str) -> None:
        self.destroyed.append(f"{sandbox_id}@{incarnation}")
        self.called.set()

    def restage(self, session_id: str) -> None:
        self.restaged.append(session_id)
        self.called.set()

    def reconnected(self, read: Sequence[str]) -> None:
        pass


@asynccontextmanager
async def serving(*buses: tuple[SharedBus, Peers]) -> AsyncIterator[None]:
    async with anyio.create_task_group() as group:
        for bus, peers in buses:
            await group.start(bus.serve, peers)
        yield
        group.cancel_scope.cancel()


async def test_a_reader_reads_what_another_process_published(store: SqlStore) -> None:
    _, session_id = await new_session(store)
    wire = Wire()
    writer, reader = SharedBus(wire.channel(), 64, 600), SharedBus(wire.channel(), 64, 600)
    async with serving((writer, Peers()), (reader, Peers())):
        with reader.subscribe(session_id) as subscription:
            feed = SessionFeed(store, subscription, session_id, last_seq=0)
            for i in range(5):
                writer.publish(
                    session_id, await store.append_events(session_id, [user_message(f"e{i}")])
                )
            got = await collect_feed(feed, 5)
    assert [e.id for e in got] == [f"e{i}" for i in range(5)]


async def test_wake_ups_reach_the_other_process_only(store: SqlStore) -> None:
    wire = Wire()
    here, there = Peers(), Peers()
    one, two = SharedBus(wire.channel(), 64, 600), SharedBus(wire.channel(), 64, 600)
    async with serving((one, here), (two, there)):
        one.run_queued("sesn_1")
        one.interrupt("sesn_2")
        one.credentials_changed("vlt_3")
        one.resources_changed("sesn_5")
        one.sandbox_destroyed("sesn_4", "2026-11-29T14:00:00.123456+00:00")
        with anyio.fail_after(5):
            while len(there.destroyed) < 1:
                await there.called.wait()
                there.called = anyio.Event()
    assert (there.woken, there.interrupted) == (["sesn_1"], ["sesn_2"])
    assert there.vaults == ["vlt_3"]
    assert there.destroyed == ["sesn_4@2026-11-29T14:00:00.123456+00:00"]
    assert there.restaged == ["sesn_5"]
    assert (here.woken, here.interrupted, here.vaults, here.destroyed) == ([], [], [], [])
    assert here.restaged == []


async def test_a_lost_notice_is_healed_by_the_slow_poll(store: SqlStore) -> None:
    _, session_id = await new_session(store)
    wire = Wire()
    writer, reader = SharedBus(wire.channel(), 64, 600), SharedBus(wire.channel(), 64, 0.05)
    async with serving((writer, Peers()), (reader, Peers())):
        with reader.subscribe(session_id) as subscription:
            feed = SessionFeed(store, subscription, session_id, last_seq=0)
            await collect_feed(feed, 0)
            wire.lose = True
            writer.publish(session_id, await store.append_events(session_id, [user_message("x")]))
            got = await collect_feed(feed, 1)
    assert [e.id for e in got] == ["x"]


async def test_a_channel_that_is_down_loses_notices_not_the_publisher() -> None:
    wire = Wire()
    wire.down = True
    bus = SharedBus(wire.channel(), 64, 600)
    async with serving((bus, Peers())):
        bus.run_queued("sesn_1")  # returns at once; the failed send is logged
        await anyio.lowlevel.checkpoint()


async def test_notices_of_a_failed_send_are_sent_once_the_channel_is_back() -> None:
    """An interrupt, a deletion or a credential change has no poll to heal it:
    dropped with a failed send, the turn on the other process ran on."""
    wire = Wire()
    here, there = Peers(), Peers()
    one, two = SharedBus(wire.channel(), 64, 600), SharedBus(wire.channel(), 64, 600)
    async with serving((one, here), (two, there)):
        wire.down = True
        one.interrupt("sesn_1")
        one.credentials_changed("vlt_2")
        with anyio.fail_after(5):
            await wire.refused.wait()
            wire.down = False
            while len(there.vaults) < 1:
                await there.called.wait()
                there.called = anyio.Event()
    assert (there.interrupted, there.vaults) == (["sesn_1"], ["vlt_2"])


async def test_a_malformed_notice_is_ignored(store: SqlStore) -> None:
    wire = Wire()
    peers = Peers()
    bus = SharedBus(wire.channel(), 64, 600)
    async with serving((bus, peers)):
        for listener in wire.listeners:
            for notice in ("", "e", "e other", "e other sesn_1 notanumber", "z other x", "q other"):
                listener(notice)
            listener("q other sesn_2")  # heard after the others, so they were handled
        with anyio.fail_after(5):
            await peers.called.wait()
    assert peers.woken == ["sesn_2"]


@pytest.mark.parametrize("database_url", BACKENDS[1:], indirect=True)
async def test_notices_pass_between_two_postgres_channels(database_url: str) -> None:
    heard: list[str] = []
    arrived = anyio.Event()

    def received(notice: str) -> None:
        heard.append(notice)
        arrived.set()

    listener, sender = open_channel(database_url), open_channel(database_url)
    async with anyio.create_task_group() as group:
        await group.start(listener.listen, received, lambda: None)
        await sender.send(["e a sesn_1 3", "q a sesn_1"])
        with anyio.fail_after(10):
            while len(heard) < 2:
                await arrived.wait()
                arrived = anyio.Event()
        group.cancel_scope.cancel()
    await sender.aclose()
    assert heard == ["e a sesn_1 3", "q a sesn_1"]


@pytest.mark.parametrize("database_url", BACKENDS[1:], indirect=True)
async def test_the_sender_s_commits_do_not_wait_for_the_log_s_flush(database_url: str) -> None:
    # A notice is a wake-up, not data: its transaction holds PostgreSQL's
    # notify lock through its commit, so a flush there would make notifying
    # transactions of every process go one at a time.
    sender = open_channel(database_url)
    await sender.send(["e a sesn_1 3"])
    connection = sender._sender  # type: ignore[attr-defined]
    cursor = await connection.execute("SHOW synchronous_commit")
    assert await cursor.fetchone() == ("off",)
    await sender.aclose()
