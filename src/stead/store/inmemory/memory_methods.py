"""``MemoryStoreStore`` on the in-memory store: each method one write or read of
``memory_stores.py``, ``memories.py``, ``memory_mounts.py`` or ``memory_reads.py``."""

from __future__ import annotations

from datetime import datetime

from stead.store.inmemory import memories, memory_mounts, memory_reads, memory_stores
from stead.store.inmemory.transactions import Transactions
from stead.store.memories import (
    Actor,
    MemoryListing,
    MemoryRecord,
    MemoryStoreChange,
    MemoryStoreRecord,
    MemoryVector,
    MemoryVersionRecord,
    MemoryWrite,
    MountBase,
    MountClaim,
    NewVersion,
    StoreFilter,
    VersionFilter,
)
from stead.store.paging import Page, PageRequest


class MemoryMethods(Transactions):
    async def create_memory_store(
        self, workspace_id: str, name: str, description: str, metadata: dict[str, str]
    ) -> MemoryStoreRecord:
        return await self._write(memory_stores.create, workspace_id, name, description, metadata)

    async def get_memory_store(self, workspace_id: str, store_id: str) -> MemoryStoreRecord:
        return await self._read(memory_stores.get, workspace_id, store_id)

    async def update_memory_store(
        self, workspace_id: str, store_id: str, change: MemoryStoreChange
    ) -> MemoryStoreRecord:
        return await self._write(memory_stores.update, workspace_id, store_id, change)

    async def archive_memory_store(self, workspace_id: str, store_id: str) -> MemoryStoreRecord:
        return await self._write(memory_stores.archive, workspace_id, store_id)

    async def delete_memory_store(self, workspace_id: str, store_id: str) -> None:
        await self._write(memory_stores.delete, workspace_id, store_id)

    async def list_memory_stores(
        self, workspace_id: str, page: PageRequest, where: StoreFilter
    ) -> Page[MemoryStoreRecord]:
        return await self._read(memory_stores.list_, workspace_id, page, where)

    async def begin_memory_version(self, new: NewVersion) -> None:
        await self._write(memories.begin, new)

    async def commit_memory_create(
        self, workspace_id: str, version_id: str, mount: MountClaim | None = None
    ) -> MemoryWrite:
        return await self._write(memories.commit_create, workspace_id, version_id, mount)

    async def commit_memory_write(
        self,
        workspace_id: str,
        version_id: str,
        expected_sha256: str | None,
        keep_stale: bool,
        mount: MountClaim | None = None,
    ) -> MemoryWrite:
        return await self._write(
            memories.commit_write, workspace_id, version_id, expected_sha256, keep_stale, mount
        )

    async def release_memory_version(self, version_id: str) -> None:
        await self._write(memories.release, version_id)

    async def get_memory(self, workspace_id: str, store_id: str, memory_id: str) -> MemoryRecord:
        return await self._read(memories.get_memory, workspace_id, store_id, memory_id)

    async def list_memories(
        self,
        workspace_id: str,
        store_id: str,
        prefix: str,
        depth: int,
        after: str | None,
        limit: int,
    ) -> MemoryListing:
        return await self._read(
            memory_reads.list_memories, workspace_id, store_id, prefix, depth, after, limit
        )

    async def delete_memory(
        self,
        workspace_id: str,
        store_id: str,
        memory_id: str,
        expected_sha256: str | None,
        actor: Actor,
        version_id: str,
        mount: MountClaim | None = None,
    ) -> None:
        await self._write(
            memories.delete_memory,
            workspace_id,
            store_id,
            memory_id,
            expected_sha256,
            actor,
            version_id,
            mount,
        )

    async def memory_mount_bases(self, session_id: str, store_id: str) -> list[MountBase]:
        return await self._read(memory_mounts.bases, session_id, store_id)

    async def put_memory_mount_bases(
        self, workspace_id: str, session_id: str, bases: list[MountBase]
    ) -> None:
        await self._write(memory_mounts.put_bases, workspace_id, session_id, bases)

    async def drop_memory_mount_bases(
        self, session_id: str, store_id: str, paths: list[str]
    ) -> None:
        await self._write(memory_mounts.drop_bases, session_id, store_id, paths)

    async def get_memory_version(
        self, workspace_id: str, store_id: str, version_id: str
    ) -> MemoryVersionRecord:
        return await self._read(memories.get_version, workspace_id, store_id, version_id)

    async def list_memory_versions(
        self, workspace_id: str, store_id: str, where: VersionFilter, page: PageRequest
    ) -> Page[MemoryVersionRecord]:
        return await self._read(memory_reads.list_versions, workspace_id, store_id, where, page)

    async def redact_memory_version(
        self, workspace_id: str, store_id: str, version_id: str, actor: Actor
    ) -> MemoryVersionRecord:
        return await self._write(memories.redact, workspace_id, store_id, version_id, actor)

    async def memory_vectors(
        self, workspace_id: str, store_id: str, prefix: str
    ) -> list[MemoryVector]:
        return await self._read(memory_reads.vectors, workspace_id, store_id, prefix)

    async def memory_blobs_to_purge(
        self, pending_before: datetime, limit: int
    ) -> list[tuple[str, str]]:
        return await self._write(memories.blobs_to_purge, pending_before, limit)

    async def forget_memory_blob(self, version_id: str) -> None:
        await self._write(memories.forget_blob, version_id)
