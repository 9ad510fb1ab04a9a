"""``PlannedRequests``: first model requests a claim planned (``plan.py``), held
until the turn runner sends them.

The claim builds its run's first request to key it in the ledger; the runner,
finding the span the claim opened, takes that very request here instead of
building it again from the same log: a render of the whole context and a hash
of it less per turn, and the request sent is the one keyed even if the MCP
tool cache changed in between. A request the runner does not find (the claim
was made by another process, or this one restarted) is built again, as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from stead.harness import McpTool, ModelRequest
from stead.runtime.bounded import Bounded


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    request: ModelRequest
    key: str
    """The op key the claim recorded the request under."""
    mcp_tools: tuple[McpTool, ...]
    """The MCP tools the request offers."""


MAX_BYTES = 64 * 1024 * 1024
"""The default bound on what the held requests weigh (``_weight``)."""


class PlannedRequests:
    """Bounded by count and by weight: a claim whose run never reaches a runner
    here (its transaction failed, another process took the run over) leaves an
    entry that ages out, and each holds a whole conversation's text; when the
    database is in trouble such entries come many at once."""

    def __init__(self, most: int = 256, max_bytes: int = MAX_BYTES) -> None:
        self._held: Bounded[str, PlannedRequest] = Bounded(most, max_bytes)
        # Claims plan on the store's writer thread; runners take on the event loop.
        self._lock = threading.Lock()

    def put(self, span_id: str, planned: PlannedRequest) -> None:
        weight = _weight(planned)
        with self._lock:
            self._held.put(span_id, planned, weight)

    def take(self, span_id: str) -> PlannedRequest | None:
        """The request planned with the span ``span_id``, once."""
        with self._lock:
            return self._held.pop(span_id)


def _weight(planned: PlannedRequest) -> int:
    """Roughly the bytes a planned request holds of its own: its canonical
    texts, made already (the claim keyed it by them). Its messages are shared
    with the session's rendering."""
    request = planned.request
    return len(request.canonical_params) + len(request.messages_json or "")
