"""Repository resources' private side in memory (``_repositories.py``'s rules):
a sealed token and clone state per ``github_repository`` resource."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from stead.jsonvalues import Json
from stead.store._repositories import with_token
from stead.store.inmemory import sessions
from stead.store.inmemory.tables import RepositoryRow, Tables, stored
from stead.store.inmemory.workspaces import check_sealed
from stead.store.resources import RepositoryState


def insert_for_session(
    t: Tables,
    now: datetime,
    workspace_id: str,
    session_id: str,
    tokens: Mapping[str, bytes | None],
) -> None:
    check_sealed(t, *tokens.values())
    for resource_id, sealed in tokens.items():
        t.repositories[resource_id] = RepositoryRow(session_id, workspace_id, sealed, None, now)


def delete_for_session(t: Tables, session_id: str) -> None:
    for resource_id in [k for k, r in t.repositories.items() if r.session_id == session_id]:
        del t.repositories[resource_id]


def states(t: Tables, session_id: str) -> list[RepositoryState]:
    return [
        RepositoryState(resource_id, row.sealed_token, row.cloned_at)
        for resource_id, row in sorted(t.repositories.items())
        if row.session_id == session_id
    ]


def set_token(
    t: Tables,
    now: datetime,
    workspace_id: str,
    session_id: str,
    resource_id: str,
    sealed: bytes,
    stamp: str,
) -> Json:
    changed, held = with_token(sessions.get(t, workspace_id, session_id), resource_id, stamp)
    check_sealed(t, sealed)
    row = t.sessions[session_id]
    t.sessions[session_id] = replace(row, resources=stored(held), updated_at=now)
    repository = t.repositories.get(resource_id)
    if repository is not None:
        t.repositories[resource_id] = replace(repository, sealed_token=sealed, updated_at=now)
    return changed


def mark_cloned(t: Tables, now: datetime, resource_id: str) -> None:
    found = t.repositories.get(resource_id)
    if found is not None:
        t.repositories[resource_id] = replace(found, cloned_at=now)


def reseal(t: Tables, now: datetime, resealed: Callable[[str, bytes], bytes | None]) -> int:
    count = 0
    for resource_id, row in list(t.repositories.items()):
        if row.sealed_token is None:
            continue
        sealed = resealed(resource_id, row.sealed_token)
        if sealed is not None:
            check_sealed(t, sealed)
            t.repositories[resource_id] = replace(row, sealed_token=sealed, updated_at=now)
            count += 1
    return count
