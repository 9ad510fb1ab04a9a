"""``FileStore`` on the SQL store: each method one transaction of ``_files.py``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from stead.store import _files
from stead.store.base import Page, PageRequest
from stead.store.files import FileRecord, NewFile

R = TypeVar("R")


class FileMethods:
    """Mixed into ``SqlStore``, which provides ``_write`` and ``_read``."""

    async def _write(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def _read(self, fn: Callable[..., R], *args: Any) -> R:
        raise NotImplementedError

    async def begin_file(self, new: NewFile, *, quota: int = 0) -> FileRecord:
        return await self._write(_files.begin_file, new, quota)

    async def file_ready(self, workspace_id: str, file_id: str) -> FileRecord:
        return await self._write(_files.file_ready, workspace_id, file_id)

    async def get_file(self, workspace_id: str, file_id: str) -> FileRecord:
        return await self._read(_files.get_file, workspace_id, file_id)

    async def list_files(
        self, workspace_id: str, page: PageRequest, scope_id: str | None
    ) -> Page[FileRecord]:
        return await self._read(_files.list_files, workspace_id, page, scope_id)

    async def files_by_ids(self, workspace_id: str, file_ids: Sequence[str]) -> list[FileRecord]:
        return await self._read(_files.files_by_ids, workspace_id, file_ids)

    async def delete_file(self, workspace_id: str, file_id: str) -> FileRecord:
        return await self._write(_files.delete_file, workspace_id, file_id)

    async def files_to_purge(self, pending_before: datetime, limit: int) -> list[FileRecord]:
        # Read first: most rounds find nothing, and an idle server that wrote
        # every round would commit for nothing (and shift the commit counts the
        # crash tests kill at).
        if not await self._read(_files.anything_to_purge, pending_before):
            return []
        return await self._write(_files.files_to_purge, pending_before, limit)

    async def expired_files(self, now: datetime, limit: int) -> list[FileRecord]:
        return await self._read(_files.expired_files, now, limit)

    async def bytes_removed(self, file_id: str) -> None:
        await self._write(_files.bytes_removed, file_id)

    async def abandon_file(self, file_id: str) -> FileRecord | None:
        return await self._write(_files.abandon_file, file_id)

    async def forget_file(self, file_id: str) -> None:
        await self._write(lambda conn, _now: _files.forget_file(conn, file_id))
