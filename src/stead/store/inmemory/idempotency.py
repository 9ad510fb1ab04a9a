"""``Idempotency-Key`` claims in memory (``_idempotency.py``'s rules): one holder
per key; an expired key, or a claim abandoned without an answer, is taken over."""

from __future__ import annotations

import secrets
from dataclasses import replace
from datetime import datetime, timedelta

from stead.store._idempotency import PURGE_BATCH, found
from stead.store.idempotency import ClaimState, IdempotencyClaim, IdempotencyKeyHeld, KeyClaim
from stead.store.inmemory.tables import IdempotencyRow, Tables


def claim(
    t: Tables,
    now: datetime,
    workspace_id: str,
    key: str,
    fingerprint: str,
    ttl_seconds: float,
    abandoned_seconds: float,
    token: str | None = None,
) -> IdempotencyClaim:
    row = t.idempotency.get((workspace_id, key))
    if row is not None and token is not None and row.token == token and row.status is None:
        return IdempotencyClaim(ClaimState.CLAIMED, token=token)
    expired = row is not None and row.created_at < now - timedelta(seconds=ttl_seconds)
    abandoned = (
        row is not None
        and row.status is None
        and row.created_at < now - timedelta(seconds=abandoned_seconds)
    )
    if row is None or expired or abandoned:
        token = token or secrets.token_hex(16)
        t.idempotency[(workspace_id, key)] = IdempotencyRow(fingerprint, token, now)
        return IdempotencyClaim(ClaimState.CLAIMED, token=token)
    return found(row, fingerprint)


def take(t: Tables, now: datetime, pending: KeyClaim) -> None:
    """``_idempotency.take``: the key claimed in the caller's transaction, or
    ``IdempotencyKeyHeld``."""
    found_claim = claim(
        t,
        now,
        pending.workspace_id,
        pending.key,
        pending.fingerprint,
        pending.ttl_seconds,
        pending.abandoned_seconds,
        token=pending.token,
    )
    if found_claim.state is not ClaimState.CLAIMED:
        raise IdempotencyKeyHeld(found_claim)


def keep(
    t: Tables,
    now: datetime,
    workspace_id: str,
    key: str,
    token: str,
    status: int,
    content_type: str | None,
    body: bytes | None,
    ttl_seconds: float,
) -> None:
    row = t.idempotency.get((workspace_id, key))
    if row is not None and row.token == token:
        answer = replace(row, status=status, content_type=content_type, body=body)
        t.idempotency[(workspace_id, key)] = answer
    oldest = now - timedelta(seconds=ttl_seconds)
    expired = [k for k, r in t.idempotency.items() if r.created_at < oldest][:PURGE_BATCH]
    for stale in expired:
        del t.idempotency[stale]


def release(t: Tables, _now: datetime, workspace_id: str, key: str, token: str) -> None:
    row = t.idempotency.get((workspace_id, key))
    if row is not None and row.token == token:
        del t.idempotency[(workspace_id, key)]
