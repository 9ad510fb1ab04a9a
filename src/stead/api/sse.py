"""Server-sent events for one session, as a raw ASGI response.

The subscription is made before the response headers go out, so a client that
has its headers (the SDK returns from ``stream()`` then) misses nothing sent
afterwards. Frames are ``event: <type>`` + ``data: <json>``; logged events also
carry ``id: <event id>`` for ``Last-Event-ID`` resumption, pending-queue echoes
do not (they are not in the log yet), nor do stream previews (never logged). A
ping frame goes out whenever the stream has been quiet for the heartbeat
interval, or while the database cannot be read. A stream whose caller is
refused (``authorised``, asked at most every ``REAUTHENTICATE_SECONDS``, before
the next frame goes out) ends there, and every stream ends when the server
begins to stop (``stopping``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from stead.api import wire
from stead.api.deps import REAUTHENTICATE_SECONDS
from stead.runtime import Bus, FeedItem, Preview, SessionFeed
from stead.store import DatabaseBusy, EventLog

OPENED = b": stream open\n\n"
BUSY_RETRY_SECONDS = 0.5
"""How soon a stream reads the log again after the database could not serve it."""
PING = b'event: ping\ndata: {"type":"ping"}\n\n'
HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def frame(item: FeedItem) -> bytes:
    event = item.event
    if isinstance(event, Preview):
        return f"event: {event.type}\ndata: ".encode() + wire.encoded(event.wire()) + b"\n\n"
    event_id = f"id: {event.id}\n" if event.seq is not None else ""
    head = f"event: {event.type}\n{event_id}data: ".encode()
    return head + wire.encoded(wire.event(event)) + b"\n\n"


class EventStream(Response):
    """A Starlette response (so FastAPI passes it through) that writes its own frames."""

    def __init__(
        self,
        store: EventLog,
        bus: Bus,
        session_id: str,
        after_seq: int | None,
        heartbeat_seconds: float,
        previews: frozenset[str] = frozenset(),
        authorised: Callable[[], Awaitable[bool]] | None = None,
        stopping: anyio.Event | None = None,
    ) -> None:
        super().__init__(media_type="text/event-stream")
        self._store = store
        self._bus = bus
        self._session_id = session_id
        self._after_seq = after_seq
        self._heartbeat = heartbeat_seconds
        self._previews = previews
        self._authorised = authorised
        self._stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        with self._bus.subscribe(self._session_id, self._previews) as subscription:
            start = self._after_seq
            if start is None:
                start = await self._store.last_seq(self._session_id)
            feed = SessionFeed(self._store, subscription, self._session_id, start)
            await send({"type": "http.response.start", "status": 200, "headers": HEADERS})
            await send(
                {"type": "http.response.body", "body": b": stream open\n\n", "more_body": True}
            )
            async with anyio.create_task_group() as group:
                group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
                if self._stopping is not None:
                    group.start_soon(_cancel_when_set, self._stopping, group.cancel_scope)
                await self._pump(feed, send)
                group.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pump(self, feed: SessionFeed, send: Send) -> None:
        check_at = anyio.current_time() + REAUTHENTICATE_SECONDS
        while True:
            items = await self._next(feed)
            if self._authorised is not None and anyio.current_time() >= check_at:
                if not await self._authorised():
                    return
                check_at = anyio.current_time() + REAUTHENTICATE_SECONDS
            if items is None:
                await send({"type": "http.response.body", "body": PING, "more_body": True})
                continue
            body = b"".join(frame(item) for item in items)
            await send({"type": "http.response.body", "body": body, "more_body": True})
            if any(item.final for item in items):
                return

    async def _next(self, feed: SessionFeed) -> list[FeedItem] | None:
        """The feed's next batch; None after a quiet heartbeat interval, or a short
        wait while the database cannot be read (the reader keeps its place and
        gets a ping meanwhile, so a database restart does not end the stream)."""
        # Only the wait is bounded: a send cut short would lose what the feed handed over.
        with anyio.move_on_after(self._heartbeat):
            try:
                return await feed.next_batch()
            except DatabaseBusy:
                await anyio.sleep(min(self._heartbeat, BUSY_RETRY_SECONDS))
        return None


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            scope.cancel()
            return


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
