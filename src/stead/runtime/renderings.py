"""``Renderings``: each busy session's log as last rendered for the model, so the
next step renders only what was logged since (``harness.context.Rendering``).

Every model step sends the whole conversation, and rendering it from the whole
log grew with the session; a claim does it inside its transaction, on the
store's writer. After a compaction a rendering holds the summary and the
events from the first one kept, and goes on from there; a context with a
refused turn is rendered whole, as its history is not the events in a row.
Bounded like ``LogCache``, by sessions, by the events their
renderings hold and by what those weigh (``Rendering.weight``): the least
recently used sessions are forgotten (and rendered whole again if they come
back); the session rendered last always stays.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from stead.harness import Rendering, build_messages, rendering
from stead.jsonvalues import Json
from stead.runtime.bounded import Bounded

MAX_BYTES = 64 * 1024 * 1024
"""The default bound on what the held renderings weigh."""


class Renderings:
    def __init__(
        self, most: int = 256, max_events: int = 50_000, max_bytes: int = MAX_BYTES
    ) -> None:
        self._held: Bounded[str, Rendering] = Bounded(most, max_bytes, max_count=max_events)
        # Claims render on the store's writer thread; runners on the event loop.
        self._lock = threading.Lock()

    def messages(self, session_id: str, events: Sequence[Json]) -> tuple[list[Json], str | None]:
        """``build_messages(events)`` for the session's log ``events``, and their
        canonical form when it was kept (None for a context with a refused turn)."""
        with self._lock:
            previous = self._held.get(session_id)
        current = rendering(events, previous)
        if current is None:
            return build_messages(events), None
        with self._lock:
            # Two renderers of one session may race: either result is right for
            # its own log, and the next step checks which log it renders.
            self._held.put(session_id, current, current.weight, count=current.count)
        return current.messages_with_json()

    def held(self) -> list[str]:
        """The sessions whose renderings are kept, least recently rendered first."""
        with self._lock:
            return self._held.keys()
