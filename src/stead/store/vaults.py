"""The vault aggregate: vaults, their credentials, and the narrow protocol for them.

The store keeps a credential's secret only sealed (``sealed``: bytes it cannot
read, made by ``stead.vault``); ``auth`` is the part the API shows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from stead.jsonvalues import Json

if TYPE_CHECKING:  # base.py builds Store on VaultStore, so only types come from it
    from stead.store.paging import Page, PageRequest


@dataclass(frozen=True, slots=True)
class VaultRecord:
    id: str
    workspace_id: str
    display_name: str
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None


@dataclass(frozen=True, slots=True)
class CredentialRecord:
    id: str
    workspace_id: str
    vault_id: str
    display_name: str | None
    metadata: dict[str, str]
    auth: Json
    sealed: bytes
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None

    def __repr__(self) -> str:  # sealed bytes are no one's business in a log line
        kind = self.auth["type"]
        return f"CredentialRecord(id={self.id!r}, vault_id={self.vault_id!r}, type={kind!r})"


VaultChange = Callable[[VaultRecord], dict[str, Any]]
CredentialChange = Callable[[CredentialRecord], dict[str, Any]]
"""Given the current row, the changed columns (``auth``, ``sealed``, ``display_name``,
``metadata``); runs inside the write transaction."""
Reseal = Callable[[CredentialRecord], bytes | None]
"""The credential's secret sealed anew, or None when it needs no change."""


class VaultStore(Protocol):
    async def create_vault(
        self, workspace_id: str, display_name: str, metadata: dict[str, str]
    ) -> VaultRecord: ...

    async def get_vault(self, workspace_id: str, vault_id: str) -> VaultRecord: ...

    async def update_vault(
        self, workspace_id: str, vault_id: str, change: VaultChange
    ) -> VaultRecord: ...

    async def archive_vault(self, workspace_id: str, vault_id: str) -> VaultRecord: ...

    async def delete_vault(self, workspace_id: str, vault_id: str) -> None:
        """Deletes the vault and every credential in it."""
        ...

    async def list_vaults(
        self, workspace_id: str, page: PageRequest, include_archived: bool
    ) -> Page[VaultRecord]: ...

    async def create_credential(
        self,
        workspace_id: str,
        vault_id: str,
        credential_id: str,
        display_name: str | None,
        metadata: dict[str, str],
        auth: Json,
        sealed: bytes,
    ) -> CredentialRecord:
        """``credential_id`` is chosen by the caller, who sealed the secret bound to it."""
        ...

    async def get_credential(
        self, workspace_id: str, vault_id: str, credential_id: str
    ) -> CredentialRecord: ...

    async def update_credential(
        self, workspace_id: str, vault_id: str, credential_id: str, change: CredentialChange
    ) -> CredentialRecord: ...

    async def archive_credential(
        self, workspace_id: str, vault_id: str, credential_id: str
    ) -> CredentialRecord: ...

    async def delete_credential(
        self, workspace_id: str, vault_id: str, credential_id: str
    ) -> None: ...

    async def list_credentials(
        self, workspace_id: str, vault_id: str, page: PageRequest, include_archived: bool
    ) -> Page[CredentialRecord]: ...

    async def active_credentials(
        self, workspace_id: str, vault_ids: Sequence[str]
    ) -> list[CredentialRecord]:
        """The credentials a session with ``vault_ids`` may use now: neither they nor
        their vault archived or deleted, in vault order, then creation order."""
        ...

    async def reseal_credentials(self, reseal: Reseal) -> int:
        """Rewrites every credential's ``sealed`` that ``reseal`` changes, in one
        transaction (a key rotation); returns how many changed."""
        ...
