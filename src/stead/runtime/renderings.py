"""``Renderings``: each busy session's log as last rendered for the model, so the
next step renders only what was logged since (``harness.context.Rendering``).

Every model step sends the whole conversation, and rendering it from the whole
log grew with the session; a claim does it inside its transaction, on the
store's writer. A log with a compaction is rendered whole, as its history is not
the whole log. Bounded like ``LogCache``: the least recently used sessions are
forgotten (and rendered whole again if they come back).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from stead.harness import Rendering, build_messages, rendering
from stead.jsonvalues import Json


class Renderings:
    def __init__(self, most: int = 256) -> None:
        self._most = most
        self._held: OrderedDict[str, Rendering] = OrderedDict()
        # Claims render on the store's writer thread; runners on the event loop.
        self._lock = threading.Lock()

    def messages(self, session_id: str, events: Sequence[Json]) -> list[Json]:
        """``build_messages(events)`` for the session's log ``events``."""
        with self._lock:
            previous = self._held.get(session_id)
        current = rendering(events, previous)
        if current is None:
            return build_messages(events)
        with self._lock:
            # Two renderers of one session may race: either result is right for
            # its own log, and the next step checks which log it renders.
            self._held[session_id] = current
            self._held.move_to_end(session_id)
            while len(self._held) > self._most:
                self._held.popitem(last=False)
        return current.messages()
