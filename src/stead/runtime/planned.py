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


class PlannedRequests:
    """Bounded: a claim whose run never reaches a runner here (its transaction
    failed, another process took the run over) leaves an entry that ages out."""

    def __init__(self, most: int = 256) -> None:
        self._most = most
        self._held: OrderedDict[str, PlannedRequest] = OrderedDict()
        # Claims plan on the store's writer thread; runners take on the event loop.
        self._lock = threading.Lock()

    def put(self, span_id: str, planned: PlannedRequest) -> None:
        with self._lock:
            self._held[span_id] = planned
            while len(self._held) > self._most:
                self._held.popitem(last=False)

    def take(self, span_id: str) -> PlannedRequest | None:
        """The request planned with the span ``span_id``, once."""
        with self._lock:
            return self._held.pop(span_id, None)
