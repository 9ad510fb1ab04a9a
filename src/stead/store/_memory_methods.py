"""``MemoryStoreStore`` on the SQL store: each method one transaction of
``_memory_stores.py``, ``_memories.py`` or ``_memory_reads.py``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from stead.store import _memories, _memory_mounts, _memory_reads, _memory_stores
from stead.store.base import Page, PageRequest
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

R = TypeVar("R")


class MemoryMethods:
    """Mixed into ``SqlStore``, which provides ``_write`` and ``_read``."""

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def create_memory_store(
        self, workspace_id: str, name: str, description: str, metadata: dict[str, str]
    ) -> MemoryStoreRecord:
        return await self._write(
            _memory_stores.create_memory_store, workspace_id, name, description, metadata
        )

    async def get_memory_store(self, workspace_id: str, store_id: str) -> MemoryStoreRecord:
        return await self._read(_memory_stores.get_memory_store, workspace_id, store_id)

    async def update_memory_store(
        self, workspace_id: str, store_id: str, change: MemoryStoreChange
    ) -> MemoryStoreRecord:
        return await self._write(_memory_stores.update_memory_store, workspace_id, store_id, change)

    async def archive_memory_store(self, workspace_id: str, store_id: str) -> MemoryStoreRecord:
        return await self._write(_memory_stores.archive_memory_store, workspace_id, store_id)

    async def delete_memory_store(self, workspace_id: str, store_id: str) -> None:
        await self._write(_memory_stores.delete_memory_store, workspace_id, store_id)

    async def list_memory_stores(
        self, workspace_id: str, page: PageRequest, where: StoreFilter
    ) -> Page[MemoryStoreRecord]:
        return await self._read(_memory_stores.list_memory_stores, workspace_id, page, where)

    async def begin_memory_version(self, new: NewVersion) -> None:
        await self._write(_memories.begin_memory_version, new)

    async def commit_memory_create(
        self, workspace_id: str, version_id: str, mount: MountClaim | None = None
    ) -> MemoryWrite:
        return await self._write(_memories.commit_memory_create, workspace_id, version_id, mount)

    async def commit_memory_write(
        self,
        workspace_id: str,
        version_id: str,
        expected_sha256: str | None,
        keep_stale: bool,
        mount: MountClaim | None = None,
    ) -> MemoryWrite:
        return await self._write(
            _memories.commit_memory_write,
            workspace_id,
            version_id,
            expected_sha256,
            keep_stale,
            mount,
        )

    async def release_memory_version(self, version_id: str) -> None:
        await self._write(_memories.release_memory_version, version_id)

    async def get_memory(self, workspace_id: str, store_id: str, memory_id: str) -> MemoryRecord:
        return await self._read(_memories.get_memory, workspace_id, store_id, memory_id)

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
            _memory_reads.list_memories, workspace_id, store_id, prefix, depth, after, limit
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
            _memories.delete_memory,
            workspace_id,
            store_id,
            memory_id,
            expected_sha256,
            actor,
            version_id,
            mount,
        )

    async def memory_mount_bases(self, session_id: str, store_id: str) -> list[MountBase]:
        return await self._read(_memory_mounts.bases, session_id, store_id)

    async def put_memory_mount_bases(
        self, workspace_id: str, session_id: str, bases: list[MountBase]
    ) -> None:
        await self._write(_memory_mounts.put_bases, workspace_id, session_id, bases)

    async def drop_memory_mount_bases(
        self, session_id: str, store_id: str, paths: list[str]
    ) -> None:
        await self._write(_memory_mounts.drop_bases, session_id, store_id, paths)

    async def get_memory_version(
        self, workspace_id: str, store_id: str, version_id: str
    ) -> MemoryVersionRecord:
        return await self._read(_memories.get_version, workspace_id, store_id, version_id)

    async def list_memory_versions(
        self, workspace_id: str, store_id: str, where: VersionFilter, page: PageRequest
    ) -> Page[MemoryVersionRecord]:
        return await self._read(
            _memory_reads.list_memory_versions, workspace_id, store_id, where, page
        )

    async def redact_memory_version(
        self, workspace_id: str, store_id: str, version_id: str, actor: Actor
    ) -> MemoryVersionRecord:
        return await self._write(
            _memories.redact_memory_version, workspace_id, store_id, version_id, actor
        )

    async def memory_vectors(
        self, workspace_id: str, store_id: str, prefix: str
    ) -> list[MemoryVector]:
        return await self._read(_memory_reads.memory_vectors, workspace_id, store_id, prefix)

    async def memory_blobs_to_purge(
        self, pending_before: datetime, limit: int
    ) -> list[tuple[str, str]]:
        # Read first: an idle server finds nothing and must commit nothing.
        if not await self._read(_memories.anything_to_purge, pending_before):
            return []
        return await self._write(_memories.memory_blobs_to_purge, pending_before, limit)

    async def forget_memory_blob(self, version_id: str) -> None:
        await self._write(lambda conn, _now: _memories.forget_memory_blob(conn, version_id))
