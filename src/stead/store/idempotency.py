"""``IdempotencyStore``: the ``Idempotency-Key`` headers a workspace sent and
the first answer to each (the narrow protocol; SQL in ``_idempotency.py``).

A key is claimed by one request at a time: the first to insert it holds it
(``token``) until it keeps its answer or releases the key. The API decides
what is kept; the store only makes the claim race-free across processes.

A request claims its key in the transaction of its own first write
(``IdempotencyStore.claiming_key``): the object it makes and the claim commit
together or not at all, and a request whose key another holds is rolled back
before it changed anything (``IdempotencyKeyHeld``). A request that writes
nothing claims the key when it is done (``claim_idempotency_key``).
"""

from __future__ import annotations

import asyncio
import enum
import secrets
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
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


@dataclass(slots=True)
class KeyClaim:
    """An ``Idempotency-Key`` a request claims with its first write (see the module)."""

    workspace_id: str
    key: str
    fingerprint: str
    ttl_seconds: float
    abandoned_seconds: float
    token: str = field(default_factory=lambda: secrets.token_hex(16))
    task: asyncio.Task[object] | None = None
    """The request's task: only its own writes claim the key, never those of a
    task it started (a session's turn), which outlive the request."""
    taken: bool = False
    """A committed write holds the key under ``token``."""
    open: bool = True
    """Writes may still take the key; closed once the route has answered."""

    def wanted(self) -> bool:
        """Whether a write in the current task should take the key."""
        return self.open and not self.taken and asyncio.current_task() is self.task


_PENDING: ContextVar[KeyClaim | None] = ContextVar("stead_idempotency_key", default=None)
"""The key the running request claims with its first write (``claiming_key``)."""


@contextmanager
def claiming_key(claim: KeyClaim) -> Iterator[None]:
    """``IdempotencyStore.claiming_key`` for every store: sets the claim that
    ``wanted_key`` gives the store's writes, for the current task."""
    claim.task = asyncio.current_task()
    reset = _PENDING.set(claim)
    try:
        yield
    finally:
        claim.open = False
        _PENDING.reset(reset)


@contextmanager
def not_claiming() -> Iterator[None]:
    """Writes within it never take the request's key: for a write that must
    stay whatever the key's answer (a refreshed OAuth grant, whose old refresh
    token the upstream has already spent), not be rolled back with a replay."""
    reset = _PENDING.set(None)
    try:
        yield
    finally:
        _PENDING.reset(reset)


def wanted_key() -> KeyClaim | None:
    """The key a write starting now must also claim, if any."""
    claim = _PENDING.get()
    return claim if claim is not None and claim.wanted() else None


class IdempotencyKeyHeld(Exception):
    """A write that would have claimed the request's key found it held (by
    another request, or answered before): the write was rolled back."""

    def __init__(self, claim: IdempotencyClaim) -> None:
        self.claim = claim
        super().__init__(f"the idempotency key is {claim.state.value}")


class IdempotencyStore(Protocol):
    def claiming_key(self, claim: KeyClaim) -> AbstractContextManager[None]:
        """Within it, the current task's first committed write also claims
        ``claim``'s key (``claim.taken`` then), or raises ``IdempotencyKeyHeld``
        having written nothing. The claim is ours again when the key holds our
        token, so a write after a rolled-back one can still take it."""
        ...

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
