"""The usage aggregate: what a model request used, the workspace's ledger by
day, and sandbox time booked (the narrow protocol; SQL in ``_usage.py``).

Counters are ``stead.usage``'s; every addition is made in the transaction
that records what was used, so nothing is counted twice after a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Protocol


@dataclass(frozen=True, slots=True)
class RequestUsage:
    """What one model request used: ``stead.usage`` counters, added to the
    session's usage and the ledger under ``model``."""

    model: str
    counters: dict[str, int]


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """A workspace's usage on one UTC day for one session and model."""

    day: date
    session_id: str | None
    """None: sandbox time of a shared sandbox."""
    model: str | None
    """None: sandbox time."""
    counters: dict[str, int]
    """``stead.usage.COUNTERS`` but ``cache_creation_input_tokens``."""
    active_seconds: float


class UsageStore(Protocol):
    async def book_sandbox_active_seconds(
        self, sandbox_id: str, *, session_id: str | None, workspace_id: str, total: float
    ) -> float:
        """Books the sandbox's active time up to ``total`` (the host's cumulative
        count): adds what is not booked yet to it, its session's usage and the
        ledger, in one transaction; returns what was added (0.0 when nothing)."""
        ...

    async def usage_ledger(
        self, workspace_id: str, first: date | None = None, last: date | None = None
    ) -> list[LedgerRow]:
        """The workspace's usage by UTC day (``first`` to ``last``, both included),
        session and model; sandbox time has no model."""
        ...
