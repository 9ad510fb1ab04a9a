"""Memory stores attached to sessions and the bases of their mounted files, in
memory (``_memory_mounts.py``'s rules: which stores a session may take and when
a write-back's claim holds are its functions)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial

from stead.jsonvalues import Json
from stead.store._memory_mounts import attached, check_base, usable
from stead.store.inmemory import memory_stores
from stead.store.inmemory.tables import MountRow, Tables
from stead.store.memories import MountBase, MountClaim


def attach(t: Tables, workspace_id: str, session_id: str, resources: Sequence[Json]) -> None:
    for store_id, field in attached(resources):
        usable(field, partial(memory_stores.get, t, workspace_id, store_id))
        t.session_memory_stores[(session_id, store_id)] = workspace_id


def sessions_of(t: Tables, workspace_id: str, store_id: str) -> set[str]:
    return {
        session_id
        for (session_id, held), workspace in t.session_memory_stores.items()
        if held == store_id and workspace == workspace_id
    }


def forget_session(t: Tables, session_id: str) -> None:
    for attached_to in [k for k in t.session_memory_stores if k[0] == session_id]:
        del t.session_memory_stores[attached_to]
    for mounted in [k for k in t.memory_mounts if k[0] == session_id]:
        del t.memory_mounts[mounted]


def move(
    t: Tables,
    now: datetime,
    workspace_id: str,
    store_id: str,
    claim: MountClaim,
    memory_id: str,
    sha256: str | None,
) -> None:
    """``_memory_mounts.move``: the claimed file's base moved to (``memory_id``,
    ``sha256``), or dropped, if it is still what the claim expects."""
    key = (claim.session_id, store_id, claim.path)
    found = t.memory_mounts.get(key)
    check_base(claim, None if found is None else found.sha256)
    t.memory_mounts.pop(key, None)
    if sha256 is not None:
        t.memory_mounts[key] = MountRow(memory_id, sha256, workspace_id, now)


def bases(t: Tables, session_id: str, store_id: str) -> list[MountBase]:
    return [
        MountBase(store_id, path, row.memory_id, row.sha256)
        for (session, held, path), row in sorted(t.memory_mounts.items())
        if session == session_id and held == store_id
    ]


def put_bases(
    t: Tables, now: datetime, workspace_id: str, session_id: str, given: list[MountBase]
) -> None:
    for base in given:
        key = (session_id, base.memory_store_id, base.path)
        t.memory_mounts[key] = MountRow(base.memory_id, base.sha256, workspace_id, now)


def drop_bases(t: Tables, _now: datetime, session_id: str, store_id: str, paths: list[str]) -> None:
    for path in paths:
        t.memory_mounts.pop((session_id, store_id, path), None)
