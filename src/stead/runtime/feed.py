"""One reader's view of a session's events: the backlog after a cursor, then live.

Log events are delivered in ``seq`` order with no gap and no duplicate: live
notices at or below the last delivered ``seq`` are skipped, and a gap (a notice
beyond ``last + 1``, or a lagged subscription) switches back to reading the
store until the reader has caught up; so does a hint that another process
wrote beyond it (the ``Bus`` carries no bodies between processes).
Pending-queue echoes (no ``seq``) and the final ``session.deleted`` notice pass
straight through; so do stream previews, except while the reader catches up
from the store (a preview then would come before the events it follows).
"""

from __future__ import annotations

from dataclasses import dataclass

from stead.runtime.bus import Preview, Subscription
from stead.store import EventLog, EventRecord

CATCH_UP_BATCH = 500


@dataclass(frozen=True, slots=True)
class FeedItem:
    event: EventRecord | Preview
    final: bool = False


class SessionFeed:
    def __init__(
        self, store: EventLog, subscription: Subscription, session_id: str, last_seq: int
    ) -> None:
        self._store = store
        self._subscription = subscription
        self._session_id = session_id
        self._last = last_seq
        self._catching_up = True

    @property
    def last_seq(self) -> int:
        return self._last

    async def next_batch(self) -> list[FeedItem]:
        """At least one item. Safe to cancel: nothing is lost that a later call would not return."""
        while True:
            items = await (self._catch_up() if self._catching_up else self._live())
            if items:
                return items

    async def _catch_up(self) -> list[FeedItem]:
        events = await self._store.events_after(self._session_id, self._last, CATCH_UP_BATCH)
        if len(events) < CATCH_UP_BATCH:
            self._catching_up = False
        if events:
            self._last = events[-1].seq or self._last
        self._subscription.seen(self._last)
        return [FeedItem(e) for e in events]

    async def _live(self) -> list[FeedItem]:
        notices, lagged = await self._subscription.take()
        if lagged:
            self._catching_up = True
        items: list[FeedItem] = []
        for notice in notices:
            if isinstance(notice, Preview):
                if not self._catching_up:
                    items.append(FeedItem(notice))
                continue
            seq = notice.event.seq
            if notice.final or seq is None:
                items.append(FeedItem(notice.event, notice.final))
            elif self._catching_up or seq <= self._last:
                continue
            elif seq == self._last + 1:
                self._last = seq
                items.append(FeedItem(notice.event))
            else:
                self._catching_up = True
        return items
