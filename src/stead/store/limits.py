"""``LimitStore``: stead's own limits per workspace and per environment, beyond a
session's budget (the narrow protocol; SQL in ``_limits.py``).

Limits are the operator's: set through the admin route or ``stead limits``,
checked in the store's own transactions (before each model request, and on
every sandbox lease acquire) so that several processes enforce one count.
A month is the UTC calendar month, read from the usage ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

WORKSPACE_LIMITS = (
    "monthly_tokens",
    "monthly_list_cost_nanos",
    "monthly_sandbox_seconds",
    "concurrent_sandboxes",
    "file_storage_bytes",
)
"""Every token a model request counts (input, output, cache reads and writes);
list cost as ``stead.usage`` prices it; sandbox active seconds; sandboxes
holding an active lease at once; bytes the workspace's files hold (checked as
each file is begun, ``files.py``; unset: the server's ``STEAD_FILES_QUOTA_BYTES``)."""
FILE_STORAGE_LIMIT = "file_storage_bytes"
ENVIRONMENT_LIMITS = ("session_sandbox_seconds",)
"""Sandbox active seconds one session of the environment may use."""
WORKSPACE = ""
"""The ``scope`` of a workspace's own limits (else an environment id)."""


@dataclass(frozen=True, slots=True)
class MonthTotals:
    """What a workspace used in the current UTC month, as its limits count it."""

    since: datetime
    tokens: int
    list_cost_nanos: int
    sandbox_seconds: float


@dataclass(frozen=True, slots=True)
class MonthUse(MonthTotals):
    """``MonthTotals`` and the sandboxes the workspace holds now."""

    sandboxes: int
    """Sandboxes holding an active lease now."""


class LimitStore(Protocol):
    async def limits(self, workspace_id: str, scope: str = WORKSPACE) -> dict[str, int]:
        """The limits set for the workspace (``scope`` WORKSPACE) or one of its
        environments; a limit that is not set is absent. ``NotFound`` for an
        unknown workspace, or an environment not in it."""
        ...

    async def set_limits(
        self, workspace_id: str, scope: str, changes: dict[str, int | None]
    ) -> dict[str, int]:
        """Sets (an int) or clears (None) each named limit; returns them all.
        ``NotFound`` for an unknown workspace, or an environment not in it."""
        ...

    async def month_use(self, workspace_id: str, *, now: datetime | None = None) -> MonthUse: ...
