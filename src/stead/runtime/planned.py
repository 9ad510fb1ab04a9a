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
from collections import OrderedDict
from dataclasses import dataclass

from stead.harness import McpTool, ModelRequest


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
        self._most = most
        self._max_bytes = max_bytes
        self._held: OrderedDict[str, tuple[PlannedRequest, int]] = OrderedDict()
        self._bytes = 0
        """What the held requests weigh."""
        # Claims plan on the store's writer thread; runners take on the event loop.
        self._lock = threading.Lock()

    def put(self, span_id: str, planned: PlannedRequest) -> None:
        weight = _weight(planned)
        with self._lock:
            replaced = self._held.pop(span_id, None)
            if replaced is not None:
                self._bytes -= replaced[1]
            self._held[span_id] = (planned, weight)
            self._bytes += weight
            while len(self._held) > self._most or (
                len(self._held) > 1 and self._bytes > self._max_bytes
            ):
                _, (_, dropped) = self._held.popitem(last=False)
                self._bytes -= dropped

    def take(self, span_id: str) -> PlannedRequest | None:
        """The request planned with the span ``span_id``, once."""
        with self._lock:
            found = self._held.pop(span_id, None)
            if found is None:
                return None
            self._bytes -= found[1]
            return found[0]


def _weight(planned: PlannedRequest) -> int:
    """Roughly the bytes a planned request holds of its own: its canonical
    texts, made already (the claim keyed it by them). Its messages are shared
    with the session's rendering."""
    request = planned.request
    return len(request.canonical_params) + len(request.messages_json or "")
