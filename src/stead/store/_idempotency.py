"""Queries of ``idempotency_keys`` (``idempotency.py`` says what a claim is).

A claim is INSERT ... ON CONFLICT DO NOTHING, then an UPDATE that takes over an
expired or abandoned row, then a read: on PostgreSQL the insert waits for a
concurrent insert of the same key to commit and the UPDATE re-checks its
condition on the row it locked, so two requests never both hold a key.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, or_, select, tuple_, update

from stead.store._compiled import compiled
from stead.store._leases import _insert
from stead.store.idempotency import ClaimState, IdempotencyClaim, IdempotencyKeyHeld, KeyClaim
from stead.store.tables import idempotency_keys

keys = idempotency_keys.c
PURGE_BATCH = 100
"""Expired keys deleted per kept answer: bounds the write, and still outpaces
the keys being made (each kept answer deletes up to this many)."""
CLAIM_ATTEMPTS = 3
"""A row a concurrent purge deleted between our insert and our read is claimed again."""


def _this(workspace_id: str, key: str) -> Any:
    return and_(keys.workspace_id == workspace_id, keys.key == key)


def _claim_statement(conn: Connection) -> Any:
    stmt = _insert(conn, idempotency_keys).on_conflict_do_nothing(
        index_elements=["workspace_id", "key"]
    )
    return stmt.returning(keys.token)


def _inserted(conn: Connection, row: dict[str, Any]) -> bool:
    """Whether the claim's row went in (read from RETURNING, never ``rowcount``)."""
    statement = compiled(conn, "idempotency.claim", lambda: _claim_statement(conn))
    cursor = statement.execute(conn, row)
    try:
        return cursor.fetchone() is not None
    finally:
        cursor.close()


def take(conn: Connection, now: datetime, pending: KeyClaim) -> None:
    """Claims ``pending``'s key in the caller's transaction, or raises
    ``IdempotencyKeyHeld`` (the caller's transaction then rolls back)."""
    found_claim = claim(
        conn,
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


def claim(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    key: str,
    fingerprint: str,
    ttl_seconds: float,
    abandoned_seconds: float,
    token: str | None = None,
) -> IdempotencyClaim:
    """Claims the key for ``token`` (a new one when None); a key that already
    holds ``token`` is the caller's."""
    token = token or secrets.token_hex(16)
    fresh = {"fingerprint": fingerprint, "token": token, "created_at": now}
    cleared = {"status": None, "content_type": None, "body": None}
    for _ in range(CLAIM_ATTEMPTS):
        if _inserted(conn, {"workspace_id": workspace_id, "key": key, **fresh, **cleared}):
            return IdempotencyClaim(ClaimState.CLAIMED, token=token)
        expired = keys.created_at < now - timedelta(seconds=ttl_seconds)
        abandoned = and_(
            keys.status.is_(None), keys.created_at < now - timedelta(seconds=abandoned_seconds)
        )
        taken = update(idempotency_keys).where(_this(workspace_id, key), or_(expired, abandoned))
        if conn.execute(taken.values(**fresh, **cleared)).rowcount == 1:
            return IdempotencyClaim(ClaimState.CLAIMED, token=token)
        row = conn.execute(select(idempotency_keys).where(_this(workspace_id, key))).one_or_none()
        if row is not None and row.token == token and row.status is None:
            return IdempotencyClaim(ClaimState.CLAIMED, token=token)
        if row is not None:
            return found(row, fingerprint)
    raise RuntimeError(f"idempotency key {key!r} kept vanishing while being claimed")


def found(row: Any, fingerprint: str) -> IdempotencyClaim:
    """What a claim of a held key answers (``row`` has the key's columns)."""
    if row.fingerprint != fingerprint:
        return IdempotencyClaim(ClaimState.MISMATCH)
    if row.status is None:
        return IdempotencyClaim(ClaimState.RUNNING)
    body = None if row.body is None else bytes(row.body)
    return IdempotencyClaim(
        ClaimState.ANSWERED, status=row.status, content_type=row.content_type, body=body
    )


def _keep_statement() -> Any:
    return (
        update(idempotency_keys)
        .where(
            keys.workspace_id == bindparam("w"),
            keys.key == bindparam("k"),
            keys.token == bindparam("t"),
        )
        .values(
            status=bindparam("status"),
            content_type=bindparam("content_type"),
            body=bindparam("body"),
        )
    )


def _purge_statement() -> Any:
    # Last in the transaction and SKIP LOCKED: the purge never waits for a row
    # another claim holds, so it cannot close a cycle of waits (SQLite ignores it).
    expired = (
        select(keys.workspace_id, keys.key)
        .where(keys.created_at < bindparam("oldest", type_=keys.created_at.type))
        .limit(PURGE_BATCH)
        .with_for_update(skip_locked=True)
    )
    return delete(idempotency_keys).where(tuple_(keys.workspace_id, keys.key).in_(expired))


def keep(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    key: str,
    token: str,
    status: int,
    content_type: str | None,
    body: bytes | None,
    ttl_seconds: float,
) -> None:
    answer = {"status": status, "content_type": content_type, "body": body}
    kept = compiled(conn, "idempotency.keep", _keep_statement)
    kept.execute(conn, {"w": workspace_id, "k": key, "t": token, **answer}).close()
    purge = compiled(conn, "idempotency.purge", _purge_statement)
    purge.execute(conn, {"oldest": now - timedelta(seconds=ttl_seconds)}).close()


def release(conn: Connection, now: datetime, workspace_id: str, key: str, token: str) -> None:
    conn.execute(delete(idempotency_keys).where(_this(workspace_id, key), keys.token == token))
