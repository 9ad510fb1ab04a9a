"""The ``Bus`` of several processes on one store (PostgreSQL).

Readers in this process get this process's events as ``LocalBus`` gives them.
Other processes get short notices through the store's ``Channel``, one line
each, ``<kind> <origin> <arg>...``:

* ``e <session> <seq>`` the session's log reaches ``seq`` (readers read it);
* ``d <session> <event id>`` the session was deleted (readers end);
* ``q <session>`` a run of the session waits to be claimed;
* ``i <session>`` a user interrupted the session's turn;
* ``c <vault>`` a credential of the vault changed;
* ``r <session>`` the session's resources changed (its sandbox is staged again);
* ``s <sandbox> <lease created_at>`` the sandbox of that lease was destroyed
  (what other processes held of it goes).

Notices are sent by one task, coalesced (a session's newest ``seq`` only), in
one round trip per batch; publishing never waits on the database. A send that
fails (the connection went with a restart, a failover or an idle timeout) is
made again at once on a new connection, then every ``RETRY_SECONDS`` until the
database takes it: an interrupt, a deletion or a credential change has no poll
to heal it. A notice another process misses while its listening connection is
away is healed by polling: every ``poll_seconds``, and after the channel
reconnects, each reader here reads the store again, and the runtime's reaper
looks for queued runs on its own schedule; after a reconnect the runtime also
looks in the log for an interrupt of each turn it runs (``Peers.reconnected``).
A lost ``s`` leaves a process holding a few kilobytes of a sandbox that is
gone (its record, its credentials in memory) until that sandbox is destroyed
again or the process stops.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import anyio
from anyio.abc import TaskStatus

from stead.config import Settings
from stead.events import EventType
from stead.runtime.bus import Bus, LocalBus, Peers, Preview, Subscription
from stead.store import Channel, ChannelDown, EventRecord, open_channel, single_brain

log = logging.getLogger("stead.runtime.bus")

BATCH = 500
"""Notices per round trip at most (a NOTIFY payload is short; a batch stays small)."""
RETRY_SECONDS = 0.5
"""Pause after a failed send; notices coalesce meanwhile."""
MAX_UNSENT = 10_000
"""Notices kept for sending again while the database is away, at most (the oldest go)."""


def open_bus(settings: Settings) -> Bus:
    """The bus for the store ``settings`` name: local for SQLite (one process)."""
    url = settings.resolved_database_url
    if single_brain(url):
        return LocalBus(settings.sse_subscriber_buffer)
    return SharedBus(open_channel(url), settings.sse_subscriber_buffer, settings.bus_poll_seconds)


class SharedBus:
    def __init__(self, channel: Channel, capacity: int, poll_seconds: float) -> None:
        self._local = LocalBus(capacity)
        self._channel = channel
        self._poll_seconds = poll_seconds
        self._origin = secrets.token_hex(8)
        """Tells this process's own notices apart when they come back."""
        self._heads: dict[str, int] = {}
        """Session -> newest seq not yet announced."""
        self._outbox: dict[str, None] = {}
        """Other notices not yet sent, in order, each once."""
        self._unsent: list[str] = []
        """Notices of a send that failed, to be sent again before the newer ones."""
        self._waiting = anyio.Event()
        self._peers: Peers | None = None

    @contextmanager
    def subscribe(
        self, session_id: str, previews: frozenset[str] = frozenset()
    ) -> Iterator[Subscription]:
        with self._local.subscribe(session_id, previews) as subscription:
            yield subscription

    def preview(self, session_id: str, preview: Preview) -> None:
        self._local.preview(session_id, preview)

    def publish(self, session_id: str, events: Sequence[EventRecord]) -> None:
        self._local.publish(session_id, events)
        seq = max((e.seq for e in events if e.seq is not None), default=None)
        if seq is not None and seq > self._heads.get(session_id, 0):
            self._heads[session_id] = seq
            self._waiting.set()

    def publish_final(self, session_id: str, event: EventRecord) -> None:
        self._local.publish_final(session_id, event)
        self._post("d", session_id, event.id)

    def run_queued(self, session_id: str) -> None:
        self._post("q", session_id)

    def interrupt(self, session_id: str) -> None:
        self._post("i", session_id)

    def credentials_changed(self, vault_id: str) -> None:
        self._post("c", vault_id)

    def resources_changed(self, session_id: str) -> None:
        self._post("r", session_id)

    def sandbox_destroyed(self, sandbox_id: str, incarnation: str) -> None:
        self._post("s", sandbox_id, incarnation)

    def reader_count(self, session_id: str) -> int:
        return self._local.reader_count(session_id)

    def _post(self, kind: str, *args: str) -> None:
        self._outbox[" ".join((kind, self._origin, *args))] = None
        self._waiting.set()

    async def serve(
        self, peers: Peers, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._peers = peers
        try:
            async with anyio.create_task_group() as group:
                await group.start(self._channel.listen, self._received, self._reconnected)
                group.start_soon(self._send_loop)
                group.start_soon(self._poll_loop)
                task_status.started()
        finally:
            self._peers = None
            with anyio.CancelScope(shield=True):
                await self._channel.aclose()

    def _take_batch(self) -> list[str]:
        notices = dict.fromkeys(self._unsent)
        notices.update((f"e {self._origin} {s} {seq}", None) for s, seq in self._heads.items())
        notices.update(self._outbox)
        self._unsent.clear()
        self._heads.clear()
        self._outbox.clear()
        return list(notices)

    async def _send_loop(self) -> None:
        while True:
            await self._waiting.wait()
            self._waiting = anyio.Event()
            notices = self._take_batch()
            for start in range(0, len(notices), BATCH):
                try:
                    await self._send(notices[start : start + BATCH])
                except ChannelDown as exc:
                    # Kept, ahead of what comes meanwhile: an interrupt, a
                    # deletion or a credential change has no poll to heal it.
                    log.warning("%s; sending them again in %.1fs", exc, RETRY_SECONDS)
                    self._unsent = notices[start:][-MAX_UNSENT:]
                    self._waiting.set()
                    await anyio.sleep(RETRY_SECONDS)
                    break

    async def _send(self, notices: list[str]) -> None:
        """Sends ``notices``; a failure is tried again at once, on a new connection
        (the one that failed may have been closed by the server long ago)."""
        try:
            await self._channel.send(notices)
        except ChannelDown:
            await self._channel.send(notices)

    async def _poll_loop(self) -> None:
        while True:
            await anyio.sleep(self._poll_seconds)
            self._local.nudge_all()

    def _reconnected(self) -> None:
        """Notices sent meanwhile are lost: readers read the store again, and the
        runtime looks there for interrupts of the turns it runs and for the
        deletion of the sessions read here."""
        self._local.nudge_all()
        if self._peers is not None:
            self._peers.reconnected(self._local.read())

    def _received(self, notice: str) -> None:
        try:
            kind, origin, *args = notice.split(" ")
            if origin != self._origin and self._peers is not None:
                self._dispatch(self._peers, kind, args)
        except (ValueError, IndexError):
            log.warning("ignored a malformed notice %r", notice[:200])

    def _dispatch(self, peers: Peers, kind: str, args: list[str]) -> None:
        if kind == "e":
            self._local.hint(args[0], int(args[1]))
        elif kind == "d":
            self._local.publish_final(args[0], _deleted(args[0], args[1]))
        elif kind == "q":
            peers.wake(args[0])
        elif kind == "i":
            peers.interrupt(args[0])
        elif kind == "c":
            peers.credentials_changed(args[0])
        elif kind == "r":
            peers.restage(args[0])
        elif kind == "s":
            peers.sandbox_destroyed(args[0], args[1])
        else:
            raise ValueError(kind)


def _deleted(session_id: str, event_id: str) -> EventRecord:
    """The ``session.deleted`` notice as the deleting process sent its readers."""
    return EventRecord(
        session_id=session_id,
        id=event_id,
        type=EventType.SESSION_DELETED,
        body={},
        processed_at=datetime.now(UTC),
    )
