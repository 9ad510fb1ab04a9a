"""Vaults and credentials (see ``vaults.py``): rows in one workspace each."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update

from stead.ids import new_id
from stead.jsonvalues import Json
from stead.store import _kept_key, _locks
from stead.store._paging import fetch_page
from stead.store.base import Page, PageRequest
from stead.store.errors import Conflict, NotFound
from stead.store.tables import vault_credentials, vaults
from stead.store.vaults import CredentialChange, CredentialRecord, Reseal, VaultChange, VaultRecord

MAX_CREDENTIALS_PER_VAULT = 256


def _vault(row: Row[Any]) -> VaultRecord:
    return VaultRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        display_name=row.display_name,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
        archived_at=row.archived_at,
    )


def _credential(row: Row[Any]) -> CredentialRecord:
    return CredentialRecord(
        id=row.id,
        workspace_id=row.workspace_id,
        vault_id=row.vault_id,
        display_name=row.display_name,
        metadata=row.metadata,
        auth=row.auth,
        sealed=bytes(row.sealed),
        created_at=row.created_at,
        updated_at=row.updated_at,
        archived_at=row.archived_at,
    )


def create_vault(
    conn: Connection, now: datetime, workspace_id: str, display_name: str, metadata: dict[str, str]
) -> VaultRecord:
    record = VaultRecord(new_id("vault"), workspace_id, display_name, metadata, now, now, None)
    conn.execute(
        insert(vaults).values(
            id=record.id,
            workspace_id=workspace_id,
            display_name=display_name,
            metadata=metadata,
            created_at=now,
            updated_at=now,
        )
    )
    return record


def get_vault(conn: Connection, workspace_id: str, vault_id: str) -> VaultRecord:
    row = conn.execute(
        select(vaults).where(vaults.c.id == vault_id, vaults.c.workspace_id == workspace_id)
    ).first()
    if row is None:
        raise NotFound("vault", vault_id)
    return _vault(row)


def _writable_vault(conn: Connection, workspace_id: str, vault_id: str) -> VaultRecord:
    """The vault, locked until commit: its credentials' limits are checked one writer at a time."""
    _locks.row(conn, vaults, vault_id)
    return writable(get_vault(conn, workspace_id, vault_id))


def writable(vault: VaultRecord) -> VaultRecord:
    """``vault``, unless it is archived (read-only)."""
    if vault.archived_at is not None:
        raise Conflict(
            f"vault {vault.id} is archived and cannot be changed", code="vault_archived", status=400
        )
    return vault


def writable_credential(credential: CredentialRecord) -> CredentialRecord:
    if credential.archived_at is not None:
        raise Conflict(
            f"credential {credential.id} is archived and cannot be changed",
            code="credential_archived",
            status=400,
        )
    return credential


def update_vault(
    conn: Connection, now: datetime, workspace_id: str, vault_id: str, change: VaultChange
) -> VaultRecord:
    current = _writable_vault(conn, workspace_id, vault_id)
    changed = {k: v for k, v in change(current).items() if getattr(current, k) != v}
    if not changed:
        return current
    conn.execute(update(vaults).where(vaults.c.id == vault_id).values(**changed, updated_at=now))
    return get_vault(conn, workspace_id, vault_id)


def archive_vault(conn: Connection, now: datetime, workspace_id: str, vault_id: str) -> VaultRecord:
    if get_vault(conn, workspace_id, vault_id).archived_at is None:
        conn.execute(
            update(vaults).where(vaults.c.id == vault_id).values(archived_at=now, updated_at=now)
        )
    return get_vault(conn, workspace_id, vault_id)


def delete_vault(conn: Connection, workspace_id: str, vault_id: str) -> None:
    _locks.row(conn, vaults, vault_id)
    get_vault(conn, workspace_id, vault_id)
    conn.execute(delete(vault_credentials).where(vault_credentials.c.vault_id == vault_id))
    conn.execute(delete(vaults).where(vaults.c.id == vault_id))


def list_vaults(
    conn: Connection, workspace_id: str, page: PageRequest, include_archived: bool
) -> Page[VaultRecord]:
    stmt = select(vaults).where(vaults.c.workspace_id == workspace_id)
    if not include_archived:
        stmt = stmt.where(vaults.c.archived_at.is_(None))
    return fetch_page(conn, stmt, [vaults.c.created_at, vaults.c.id], page, _vault)


def _identity(auth: Json) -> tuple[str, str]:
    """What at most one live credential of a vault may claim."""
    if auth["type"] == "environment_variable":
        return ("secret_name", auth["secret_name"])
    return ("mcp_server_url", auth["mcp_server_url"])


def _check_unique(conn: Connection, vault_id: str, auth: Json, except_id: str | None) -> None:
    rows = conn.execute(
        select(vault_credentials.c.id, vault_credentials.c.auth).where(
            vault_credentials.c.vault_id == vault_id, vault_credentials.c.archived_at.is_(None)
        )
    ).all()
    check_unique(vault_id, auth, [(row.id, row.auth) for row in rows], except_id)


def check_unique(
    vault_id: str, auth: Json, live: Sequence[tuple[str, Json]], except_id: str | None
) -> None:
    """Refuses ``auth`` (new, or credential ``except_id``'s change) beside the
    vault's ``live`` (id, auth) credentials: one too many, or a claim another holds."""
    claim = _identity(auth)
    if len(live) >= MAX_CREDENTIALS_PER_VAULT and except_id is None:
        raise Conflict(
            f"vault {vault_id} holds {MAX_CREDENTIALS_PER_VAULT} credentials, the most it may; "
            "archive or delete one first",
            status=400,
        )
    for ident, held in live:
        if ident != except_id and _identity(held) == claim:
            raise Conflict(
                f"auth.{claim[0]}: credential {ident} of this vault already has {claim[1]!r}"
            )


def create_credential(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    vault_id: str,
    credential_id: str,
    display_name: str | None,
    metadata: dict[str, str],
    auth: Json,
    sealed: bytes,
) -> CredentialRecord:
    _writable_vault(conn, workspace_id, vault_id)
    _check_unique(conn, vault_id, auth, None)
    _kept_key.check(conn, sealed)
    record = CredentialRecord(
        credential_id, workspace_id, vault_id, display_name, metadata, auth, sealed, now, now, None
    )
    conn.execute(
        insert(vault_credentials).values(
            id=credential_id,
            workspace_id=workspace_id,
            vault_id=vault_id,
            display_name=display_name,
            metadata=metadata,
            auth=auth,
            sealed=sealed,
            created_at=now,
            updated_at=now,
        )
    )
    return record


def get_credential(
    conn: Connection, workspace_id: str, vault_id: str, credential_id: str
) -> CredentialRecord:
    row = conn.execute(
        select(vault_credentials).where(
            vault_credentials.c.id == credential_id,
            vault_credentials.c.vault_id == vault_id,
            vault_credentials.c.workspace_id == workspace_id,
        )
    ).first()
    if row is None:
        get_vault(conn, workspace_id, vault_id)  # a missing vault is named as such
        raise NotFound("credential", credential_id)
    return _credential(row)


def update_credential(
    conn: Connection,
    now: datetime,
    workspace_id: str,
    vault_id: str,
    credential_id: str,
    change: CredentialChange,
) -> CredentialRecord:
    _writable_vault(conn, workspace_id, vault_id)
    current = writable_credential(get_credential(conn, workspace_id, vault_id, credential_id))
    changed = {k: v for k, v in change(current).items() if getattr(current, k) != v}
    if not changed:
        return current
    if "auth" in changed:
        _check_unique(conn, vault_id, changed["auth"], credential_id)
    if "sealed" in changed:
        _kept_key.check(conn, changed["sealed"])
    conn.execute(
        update(vault_credentials)
        .where(vault_credentials.c.id == credential_id)
        .values(**changed, updated_at=now)
    )
    return get_credential(conn, workspace_id, vault_id, credential_id)


def archive_credential(
    conn: Connection, now: datetime, workspace_id: str, vault_id: str, credential_id: str
) -> CredentialRecord:
    if get_credential(conn, workspace_id, vault_id, credential_id).archived_at is None:
        conn.execute(
            update(vault_credentials)
            .where(vault_credentials.c.id == credential_id)
            .values(archived_at=now, updated_at=now)
        )
    return get_credential(conn, workspace_id, vault_id, credential_id)


def delete_credential(
    conn: Connection, workspace_id: str, vault_id: str, credential_id: str
) -> None:
    get_credential(conn, workspace_id, vault_id, credential_id)
    conn.execute(delete(vault_credentials).where(vault_credentials.c.id == credential_id))


def list_credentials(
    conn: Connection, workspace_id: str, vault_id: str, page: PageRequest, include_archived: bool
) -> Page[CredentialRecord]:
    get_vault(conn, workspace_id, vault_id)
    stmt = select(vault_credentials).where(vault_credentials.c.vault_id == vault_id)
    if not include_archived:
        stmt = stmt.where(vault_credentials.c.archived_at.is_(None))
    key = [vault_credentials.c.created_at, vault_credentials.c.id]
    return fetch_page(conn, stmt, key, page, _credential)


def active_credentials(
    conn: Connection, workspace_id: str, vault_ids: Sequence[str]
) -> list[CredentialRecord]:
    if not vault_ids:
        return []
    rows = conn.execute(
        select(vault_credentials)
        .join(vaults, vaults.c.id == vault_credentials.c.vault_id)
        .where(
            vaults.c.workspace_id == workspace_id,
            vaults.c.id.in_(list(vault_ids)),
            vaults.c.archived_at.is_(None),
            vault_credentials.c.archived_at.is_(None),
        )
        .order_by(vault_credentials.c.created_at, vault_credentials.c.id)
    ).all()
    order = {vault_id: i for i, vault_id in enumerate(vault_ids)}
    return sorted((_credential(r) for r in rows), key=lambda c: order[c.vault_id])


def check_attachable(conn: Connection, workspace_id: str, vault_ids: Sequence[str]) -> None:
    """Raises unless every vault exists in the workspace and is not archived."""
    attachable(vault_ids, lambda vault_id: get_vault(conn, workspace_id, vault_id))


def attachable(vault_ids: Sequence[str], get: Callable[[str], VaultRecord]) -> None:
    """Raises unless ``get`` finds each of ``vault_ids`` and none is archived."""
    for i, vault_id in enumerate(vault_ids):
        try:
            vault = get(vault_id)
        except NotFound as exc:
            raise NotFound(exc.kind, exc.ident, field=f"vault_ids.{i}") from None
        if vault.archived_at is not None:
            raise Conflict(
                f"vault_ids.{i}: vault {vault_id} is archived; new sessions cannot use it",
                code="vault_archived",
                status=400,
            )


def reseal_credentials(conn: Connection, now: datetime, reseal: Reseal) -> int:
    changed = 0
    kept = _kept_key.kept(conn)
    for row in conn.execute(select(vault_credentials)).all():
        sealed = reseal(_credential(row))
        if sealed is not None:
            _kept_key.refuse_others(kept, [sealed])
            conn.execute(
                update(vault_credentials)
                .where(vault_credentials.c.id == row.id)
                .values(sealed=sealed)
            )
            changed += 1
    return changed
