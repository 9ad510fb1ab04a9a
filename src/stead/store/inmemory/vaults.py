"""Vaults and their credentials in memory (``_vaults.py``'s rules: which vault or
credential may change, which credentials a vault may hold together and which
vaults a session may name are its functions). A secret is kept sealed only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store._sessions import changed
from stead.store._vaults import attachable, check_unique, writable, writable_credential
from stead.store.errors import NotFound
from stead.store.inmemory.tables import Held, Tables, held, page_of
from stead.store.inmemory.workspaces import check_sealed
from stead.store.paging import Page, PageRequest
from stead.store.vaults import CredentialChange, CredentialRecord, Reseal, VaultChange, VaultRecord

VAULT_JSON = ("metadata",)
CREDENTIAL_JSON = ("metadata", "auth")


def create_vault(
    t: Tables, now: datetime, workspace_id: str, display_name: str, metadata: dict[str, str]
) -> VaultRecord:
    record = VaultRecord(new_id("vault"), workspace_id, display_name, metadata, now, now, None)
    t.vaults[record.id] = held(record, *VAULT_JSON)
    return get_vault(t, workspace_id, record.id)


def get_vault(t: Tables, workspace_id: str, vault_id: str) -> VaultRecord:
    found = t.vaults.get(vault_id)
    if found is None or found.kept.workspace_id != workspace_id:
        raise NotFound("vault", vault_id)
    return found.record()


def update_vault(
    t: Tables, now: datetime, workspace_id: str, vault_id: str, change: VaultChange
) -> VaultRecord:
    current = writable(get_vault(t, workspace_id, vault_id))
    values = changed(current, change(current))
    if not values:
        return current
    t.vaults[vault_id] = held(replace(current, **values, updated_at=now), *VAULT_JSON)
    return get_vault(t, workspace_id, vault_id)


def archive_vault(t: Tables, now: datetime, workspace_id: str, vault_id: str) -> VaultRecord:
    current = get_vault(t, workspace_id, vault_id)
    if current.archived_at is None:
        current = replace(current, archived_at=now, updated_at=now)
        t.vaults[vault_id] = held(current, *VAULT_JSON)
    return current


def delete_vault(t: Tables, workspace_id: str, vault_id: str) -> None:
    get_vault(t, workspace_id, vault_id)
    for credential_id in [k for k, c in t.credentials.items() if c.kept.vault_id == vault_id]:
        del t.credentials[credential_id]
    del t.vaults[vault_id]


def list_vaults(
    t: Tables, workspace_id: str, page: PageRequest, include_archived: bool
) -> Page[VaultRecord]:
    rows = [
        v.kept
        for v in t.vaults.values()
        if v.kept.workspace_id == workspace_id and (include_archived or v.kept.archived_at is None)
    ]
    found = page_of(rows, lambda v: (v.created_at, v.id), page)
    items = [t.vaults[v.id].record() for v in found.items]
    return Page(items, found.has_next, found.has_prev)


def _live(t: Tables, vault_id: str) -> list[tuple[str, Json]]:
    """(id, auth) of the vault's credentials that are not archived."""
    return [
        (c.kept.id, c.record().auth)
        for c in t.credentials.values()
        if c.kept.vault_id == vault_id and c.kept.archived_at is None
    ]


def create_credential(
    t: Tables,
    now: datetime,
    workspace_id: str,
    vault_id: str,
    credential_id: str,
    display_name: str | None,
    metadata: dict[str, str],
    auth: Json,
    sealed: bytes,
) -> CredentialRecord:
    writable(get_vault(t, workspace_id, vault_id))
    check_unique(vault_id, auth, _live(t, vault_id), None)
    check_sealed(t, sealed)
    record = CredentialRecord(
        credential_id, workspace_id, vault_id, display_name, metadata, auth, sealed, now, now, None
    )
    t.credentials[credential_id] = held(record, *CREDENTIAL_JSON)
    return get_credential(t, workspace_id, vault_id, credential_id)


def _credential(
    t: Tables, workspace_id: str, vault_id: str, credential_id: str
) -> Held[CredentialRecord]:
    found = t.credentials.get(credential_id)
    if found is None or (found.kept.vault_id, found.kept.workspace_id) != (vault_id, workspace_id):
        get_vault(t, workspace_id, vault_id)  # a missing vault is named as such
        raise NotFound("credential", credential_id)
    return found


def get_credential(
    t: Tables, workspace_id: str, vault_id: str, credential_id: str
) -> CredentialRecord:
    return _credential(t, workspace_id, vault_id, credential_id).record()


def update_credential(
    t: Tables,
    now: datetime,
    workspace_id: str,
    vault_id: str,
    credential_id: str,
    change: CredentialChange,
) -> CredentialRecord:
    writable(get_vault(t, workspace_id, vault_id))
    current = writable_credential(get_credential(t, workspace_id, vault_id, credential_id))
    values = changed(current, change(current))
    if not values:
        return current
    if "auth" in values:
        check_unique(vault_id, values["auth"], _live(t, vault_id), credential_id)
    check_sealed(t, values.get("sealed"))
    updated = replace(current, **values, updated_at=now)
    t.credentials[credential_id] = held(updated, *CREDENTIAL_JSON)
    return get_credential(t, workspace_id, vault_id, credential_id)


def archive_credential(
    t: Tables, now: datetime, workspace_id: str, vault_id: str, credential_id: str
) -> CredentialRecord:
    current = get_credential(t, workspace_id, vault_id, credential_id)
    if current.archived_at is None:
        current = replace(current, archived_at=now, updated_at=now)
        t.credentials[credential_id] = held(current, *CREDENTIAL_JSON)
    return current


def delete_credential(
    t: Tables, _now: datetime, workspace_id: str, vault_id: str, credential_id: str
) -> None:
    _credential(t, workspace_id, vault_id, credential_id)
    del t.credentials[credential_id]


def list_credentials(
    t: Tables, workspace_id: str, vault_id: str, page: PageRequest, include_archived: bool
) -> Page[CredentialRecord]:
    get_vault(t, workspace_id, vault_id)
    rows = [
        c.kept
        for c in t.credentials.values()
        if c.kept.vault_id == vault_id and (include_archived or c.kept.archived_at is None)
    ]
    found = page_of(rows, lambda c: (c.created_at, c.id), page)
    items = [t.credentials[c.id].record() for c in found.items]
    return Page(items, found.has_next, found.has_prev)


def active_credentials(
    t: Tables, workspace_id: str, vault_ids: Sequence[str]
) -> list[CredentialRecord]:
    usable = {
        v.kept.id
        for v in t.vaults.values()
        if v.kept.workspace_id == workspace_id
        and v.kept.id in vault_ids
        and v.kept.archived_at is None
    }
    found = sorted(
        (c.kept for c in t.credentials.values() if c.kept.vault_id in usable),
        key=lambda c: (c.created_at, c.id),
    )
    order = {vault_id: i for i, vault_id in enumerate(vault_ids)}
    live = [t.credentials[c.id].record() for c in found if c.archived_at is None]
    return sorted(live, key=lambda c: order[c.vault_id])


def check_attachable(t: Tables, workspace_id: str, vault_ids: Sequence[str]) -> None:
    attachable(vault_ids, lambda vault_id: get_vault(t, workspace_id, vault_id))


def reseal_credentials(t: Tables, now: datetime, reseal: Reseal) -> int:
    count = 0
    for credential_id, found in list(t.credentials.items()):
        sealed = reseal(found.record())
        if sealed is not None:
            check_sealed(t, sealed)
            t.credentials[credential_id] = replace(found, kept=replace(found.kept, sealed=sealed))
            count += 1
    return count
