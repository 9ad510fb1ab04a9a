"""``IdempotencyStore``: the ``Idempotency-Key`` headers a workspace sent and
the first answer to each (the narrow protocol; SQL in ``_idempotency.py``).

A key is claimed by one request at a time: the first to insert it holds it
(``token``) until it keeps its answer or releases the key. The API decides
what is kept; the store only makes the claim race-free across processes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class ClaimState(enum.Enum):
    CLAIMED = "claimed"
    """The caller holds the key: run the request, then keep or release."""
    RUNNING = "running"
    """Another request with the same fingerprint holds it and has no answer yet."""
    ANSWERED = "answered"
    """The first request's answer (``status``, ``content_type``, ``body``)."""
    MISMATCH = "mismatch"
    """The key was used with another request (another fingerprint)."""


@dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    state: ClaimState
    token: str | None = None
    """The holder's token (CLAIMED only)."""
    status: int | None = None
    content_type: str | None = None
    body: bytes | None = None
    """None with a status: the answer was too large to keep (the API says so)."""


class IdempotencyStore(Protocol):
    async def claim_idempotency_key(
        self,
        workspace_id: str,
        key: str,
        fingerprint: str,
        *,
        ttl_seconds: float,
        abandoned_seconds: float,
    ) -> IdempotencyClaim:
        """Claims ``key`` for a request with ``fingerprint``, or says who has it.

        A key older than ``ttl_seconds`` is free again; a claim without an answer
        older than ``abandoned_seconds`` (its process died) is taken over.
        Concurrent claims of one key leave one holder, on every backend."""
        ...

    async def keep_idempotent_answer(
        self,
        workspace_id: str,
        key: str,
        token: str,
        *,
        status: int,
        content_type: str | None,
        body: bytes | None,
        ttl_seconds: float,
    ) -> None:
        """Keeps the answer of the claim ``token`` (nothing when it lost the key),
        and deletes a bounded batch of any workspace's keys older than
        ``ttl_seconds`` (no other task prunes them)."""
        ...

    async def release_idempotency_key(self, workspace_id: str, key: str, token: str) -> None:
        """Gives up the claim ``token`` without an answer: the next request runs."""
        ...
