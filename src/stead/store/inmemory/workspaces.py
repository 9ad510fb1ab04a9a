"""Workspaces, API keys and installation secrets in memory (``_workspaces.py``'s rules)."""

from __future__ import annotations

import secrets
from dataclasses import replace
from datetime import datetime

from stead.ids import new_id
from stead.store._kept_key import refuse_others
from stead.store._workspaces import KEY_PREFIX, hash_secret
from stead.store.errors import NotFound
from stead.store.inmemory.tables import Tables
from stead.store.workspaces import ApiKey, Workspace
from stead.vault import KEPT_KEY


def create_workspace(t: Tables, now: datetime, name: str) -> Workspace:
    workspace = Workspace(id=new_id("workspace"), name=name, created_at=now)
    t.workspaces[workspace.id] = workspace
    return workspace


def list_workspaces(t: Tables) -> list[Workspace]:
    return sorted(t.workspaces.values(), key=lambda w: w.created_at)


def create_api_key(
    t: Tables, now: datetime, workspace_id: str, name: str, admin: bool
) -> tuple[ApiKey, str]:
    if workspace_id not in t.workspaces:
        raise NotFound("workspace", workspace_id)
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(new_id("api_key"), workspace_id, name, secret[-4:], now, admin=admin)
    t.api_keys[key.id] = (key, hash_secret(secret))
    return key, secret


def new_workspace_key(
    t: Tables, now: datetime, workspace_name: str, key_name: str, admin: bool
) -> tuple[ApiKey, str]:
    workspace = create_workspace(t, now, workspace_name)
    return create_api_key(t, now, workspace.id, key_name, admin)


def first_api_key(
    t: Tables, now: datetime, workspace_name: str, key_name: str
) -> tuple[ApiKey, str] | None:
    if t.api_keys:
        return None
    workspace = create_workspace(t, now, workspace_name)
    return create_api_key(t, now, workspace.id, key_name, admin=False)


def end_console_login(t: Tables, now: datetime, token_hash: str, expires_at: datetime) -> None:
    for ended in [h for h, at in t.console_logouts.items() if at <= now]:
        del t.console_logouts[ended]
    t.console_logouts.setdefault(token_hash, expires_at)


def list_api_keys(t: Tables) -> list[ApiKey]:
    return sorted((key for key, _ in t.api_keys.values()), key=lambda k: (k.created_at, k.id))


def revoke_api_key(t: Tables, now: datetime, key_id: str) -> ApiKey:
    """Revokes the key (again: keeps the first revocation's time)."""
    if key_id not in t.api_keys:
        raise NotFound("api_key", key_id)
    key, hashed = t.api_keys[key_id]
    if key.revoked_at is None:
        key = replace(key, revoked_at=now)
        t.api_keys[key_id] = (key, hashed)
    return key


def authenticate(t: Tables, secret: str) -> ApiKey | None:
    hashed = hash_secret(secret)
    for key, key_hash in t.api_keys.values():
        if key_hash == hashed and key.revoked_at is None:
            return key
    return None


def installation_secret(t: Tables, _now: datetime, name: str) -> bytes:
    return t.secrets.setdefault(name, secrets.token_bytes(32))


def installation_value(t: Tables, _now: datetime, name: str, value: bytes) -> bytes:
    return t.secrets.setdefault(name, value)


def replace_installation_value(t: Tables, _now: datetime, name: str, value: bytes) -> None:
    t.secrets[name] = value


def check_sealed(t: Tables, *sealed: bytes | None) -> None:
    """``_kept_key.check``: refuses a value sealed under a key the database did not keep."""
    refuse_others(t.secrets.get(KEPT_KEY), sealed)
