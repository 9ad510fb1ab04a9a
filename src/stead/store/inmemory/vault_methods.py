"""``VaultStore`` on the in-memory store: each method one write or read of ``vaults.py``."""

from __future__ import annotations

from collections.abc import Sequence

from stead.jsonvalues import Json
from stead.store.inmemory import vaults, webhooks
from stead.store.inmemory.transactions import Transactions
from stead.store.paging import Page, PageRequest
from stead.store.vaults import CredentialChange, CredentialRecord, Reseal, VaultChange, VaultRecord


class VaultMethods(Transactions):
    async def create_vault(
        self, workspace_id: str, display_name: str, metadata: dict[str, str]
    ) -> VaultRecord:
        return await self._write(
            webhooks.raising("vault.created", vaults.create_vault),
            workspace_id,
            display_name,
            metadata,
        )

    async def get_vault(self, workspace_id: str, vault_id: str) -> VaultRecord:
        return await self._read(vaults.get_vault, workspace_id, vault_id)

    async def update_vault(
        self, workspace_id: str, vault_id: str, change: VaultChange
    ) -> VaultRecord:
        return await self._write(vaults.update_vault, workspace_id, vault_id, change)

    async def archive_vault(self, workspace_id: str, vault_id: str) -> VaultRecord:
        return await self._write(
            webhooks.raising("vault.archived", vaults.archive_vault, "archived_at"),
            workspace_id,
            vault_id,
        )

    async def delete_vault(self, workspace_id: str, vault_id: str) -> None:
        await self._write(
            webhooks.removing("vault.deleted", vaults.delete_vault), workspace_id, vault_id
        )

    async def list_vaults(
        self, workspace_id: str, page: PageRequest, include_archived: bool
    ) -> Page[VaultRecord]:
        return await self._read(vaults.list_vaults, workspace_id, page, include_archived)

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
        return await self._write(
            vaults.create_credential,
            workspace_id,
            vault_id,
            credential_id,
            display_name,
            metadata,
            auth,
            sealed,
        )

    async def get_credential(
        self, workspace_id: str, vault_id: str, credential_id: str
    ) -> CredentialRecord:
        return await self._read(vaults.get_credential, workspace_id, vault_id, credential_id)

    async def update_credential(
        self, workspace_id: str, vault_id: str, credential_id: str, change: CredentialChange
    ) -> CredentialRecord:
        return await self._write(
            vaults.update_credential, workspace_id, vault_id, credential_id, change
        )

    async def archive_credential(
        self, workspace_id: str, vault_id: str, credential_id: str
    ) -> CredentialRecord:
        return await self._write(vaults.archive_credential, workspace_id, vault_id, credential_id)

    async def delete_credential(self, workspace_id: str, vault_id: str, credential_id: str) -> None:
        await self._write(vaults.delete_credential, workspace_id, vault_id, credential_id)

    async def list_credentials(
        self, workspace_id: str, vault_id: str, page: PageRequest, include_archived: bool
    ) -> Page[CredentialRecord]:
        return await self._read(
            vaults.list_credentials, workspace_id, vault_id, page, include_archived
        )

    async def active_credentials(
        self, workspace_id: str, vault_ids: Sequence[str]
    ) -> list[CredentialRecord]:
        return await self._read(vaults.active_credentials, workspace_id, vault_ids)

    async def reseal_credentials(self, reseal: Reseal) -> int:
        return await self._write(vaults.reseal_credentials, reseal)
