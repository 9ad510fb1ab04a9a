"""Workspaces and API keys. Keys are stored as SHA-256 hashes; the secret is shown once."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from stead.ids import new_id
from stead.store import _locks
from stead.store._leases import _insert
from stead.store.base import ApiKey, Workspace
from stead.store.errors import NotFound
from stead.store.tables import api_keys, console_logouts, installation_secrets, workspaces

KEY_PREFIX = "sk-stead-"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_workspace(conn: Connection, now: datetime, name: str) -> Workspace:
    ws = Workspace(id=new_id("workspace"), name=name, created_at=now)
    conn.execute(insert(workspaces).values(id=ws.id, name=ws.name, created_at=now))
    return ws


def list_workspaces(conn: Connection) -> list[Workspace]:
    rows = conn.execute(select(workspaces).order_by(workspaces.c.created_at)).all()
    return [Workspace(id=r.id, name=r.name, created_at=r.created_at) for r in rows]


def create_api_key(
    conn: Connection, now: datetime, workspace_id: str, name: str, admin: bool = False
) -> tuple[ApiKey, str]:
    if conn.execute(select(workspaces.c.id).where(workspaces.c.id == workspace_id)).first() is None:
        raise NotFound("workspace", workspace_id)
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        id=new_id("api_key"),
        workspace_id=workspace_id,
        name=name,
        hint=secret[-4:],
        created_at=now,
        admin=admin,
    )
    conn.execute(
        insert(api_keys).values(
            id=key.id,
            workspace_id=workspace_id,
            name=name,
            key_hash=hash_secret(secret),
            hint=key.hint,
            created_at=now,
            admin=admin,
        )
    )
    return key, secret


def new_workspace_key(
    conn: Connection, now: datetime, workspace_name: str, key_name: str, admin: bool
) -> tuple[ApiKey, str]:
    workspace = create_workspace(conn, now, workspace_name)
    return create_api_key(conn, now, workspace.id, key_name, admin)


def _api_key(row: Any) -> ApiKey:
    return ApiKey(
        id=row.id,
        workspace_id=row.workspace_id,
        name=row.name,
        hint=row.hint,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        admin=row.admin,
    )


def list_api_keys(conn: Connection) -> list[ApiKey]:
    rows = conn.execute(select(api_keys).order_by(api_keys.c.created_at, api_keys.c.id)).all()
    return [_api_key(r) for r in rows]


def revoke_api_key(conn: Connection, now: datetime, key_id: str) -> ApiKey:
    """Revokes the key (again: keeps the first revocation's time)."""
    row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).first()
    if row is None:
        raise NotFound("api_key", key_id)
    if row.revoked_at is None:
        conn.execute(update(api_keys).where(api_keys.c.id == key_id).values(revoked_at=now))
        return replace(_api_key(row), revoked_at=now)
    return _api_key(row)


def authenticate(conn: Connection, secret: str) -> ApiKey | None:
    row = conn.execute(
        select(api_keys).where(
            api_keys.c.key_hash == hash_secret(secret), api_keys.c.revoked_at.is_(None)
        )
    ).first()
    return None if row is None else _api_key(row)


def count_api_keys(conn: Connection) -> int:
    return int(conn.execute(select(func.count()).select_from(api_keys)).scalar_one())


def first_api_key(
    conn: Connection, now: datetime, workspace_name: str, key_name: str
) -> tuple[ApiKey, str] | None:
    _locks.table(conn, api_keys)
    if count_api_keys(conn):
        return None
    workspace = create_workspace(conn, now, workspace_name)
    return create_api_key(conn, now, workspace.id, key_name)


def end_console_login(
    conn: Connection, now: datetime, token_hash: str, expires_at: datetime
) -> None:
    conn.execute(delete(console_logouts).where(console_logouts.c.expires_at <= now))
    # Two logouts of one login at once (two tabs, a retry) both insert it.
    ended = _insert(conn, console_logouts).values(token_hash=token_hash, expires_at=expires_at)
    conn.execute(ended.on_conflict_do_nothing(index_elements=["token_hash"]))


def console_login_ended(conn: Connection, token_hash: str) -> bool:
    found = select(console_logouts.c.token_hash).where(console_logouts.c.token_hash == token_hash)
    return conn.execute(found).first() is not None


def find_installation_secret(conn: Connection, name: str) -> bytes | None:
    found = conn.execute(
        select(installation_secrets.c.value).where(installation_secrets.c.name == name)
    ).scalar_one_or_none()
    return None if found is None else bytes(found)


def installation_secret(conn: Connection, now: datetime, name: str) -> bytes:
    """The installation's secret ``name`` (32 random bytes), made on first use."""
    return installation_value(conn, now, name, secrets.token_bytes(32))


def installation_value(conn: Connection, now: datetime, name: str, value: bytes) -> bytes:
    """The value kept under ``name``: ``value`` when none was, else the kept one.

    Two first uses at once cannot both insert: the name is the primary key, and a
    transaction that loses the race is run again (``workers.py``) and finds it.
    """
    found = find_installation_secret(conn, name)
    if found is not None:
        return found
    conn.execute(insert(installation_secrets).values(name=name, value=value, created_at=now))
    return value


def replace_installation_value(conn: Connection, now: datetime, name: str, value: bytes) -> None:
    kept = installation_secrets.c
    done = conn.execute(update(installation_secrets).where(kept.name == name).values(value=value))
    if done.rowcount == 0:
        conn.execute(insert(installation_secrets).values(name=name, value=value, created_at=now))
