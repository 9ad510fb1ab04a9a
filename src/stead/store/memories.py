"""The memory store aggregate: stores, memories, memory versions, and their protocol.

A memory's content lives in the blob store, one blob per version under
``MemoryVersionRecord.blob_key``; the store keeps paths, hashes, sizes and who
wrote what. Every write of a memory is a new immutable version, committed in
two steps so no blob is ever unnamed: ``begin_memory_version`` records it
pending (invisible) before its blob is written, ``commit_memory_create`` or
``commit_memory_write`` makes it visible and moves the memory to it. A pending
version whose writer died is collected by the purger after a grace, as is the
blob of a redacted version or of a deleted store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from stead.store.errors import Conflict

if TYPE_CHECKING:  # base.py builds Store on MemoryStoreStore, so only types come from it
    from stead.store.paging import Page, PageRequest

PRECONDITION_FAILED = "memory_precondition_failed_error"
PATH_CONFLICT = "memory_path_conflict_error"
MOUNT_MOVED = "memory_mount_moved"
"""A write-back whose file's base moved on: another write-back of it committed."""


def precondition_failed(field: str, current: MemoryRecord) -> Conflict:
    """The write or delete named an older content hash than ``current`` has."""
    return Conflict(
        f"{field}: memory {current.id} has content_sha256 {current.content_sha256}",
        code=PRECONDITION_FAILED,
        details={"current_content_sha256": current.content_sha256},
    )


def store_archived(store_id: str) -> Conflict:
    """A write to a memory of an archived store (its memories read-only)."""
    return Conflict(
        f"memory store {store_id} is archived: its memories can be read and deleted, not written",
        code="memory_store_archived",
        status=400,
    )


@dataclass(frozen=True, slots=True)
class Actor:
    """Who wrote or redacted a version: ``api_actor`` (an API key) or ``session_actor``."""

    type: str
    id: str


@dataclass(frozen=True, slots=True)
class MemoryStoreRecord:
    id: str
    workspace_id: str
    name: str
    description: str
    metadata: dict[str, str]
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    id: str
    memory_store_id: str
    path: str
    content_sha256: str
    content_size_bytes: int
    version_id: str
    blob_key: str
    """Where the current version's content is."""
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class MemoryVersionRecord:
    id: str
    memory_store_id: str
    memory_id: str
    operation: str
    """``created``, ``modified`` or ``deleted``."""
    path: str | None
    content_sha256: str | None
    content_size_bytes: int | None
    blob_key: str | None
    """None once redacted (or for a ``deleted`` version, which has no content)."""
    created_by: Actor | None
    created_at: datetime
    redacted_at: datetime | None
    redacted_by: Actor | None


@dataclass(frozen=True, slots=True)
class NewVersion:
    """A version about to be written; its id and blob key are chosen by the caller.
    ``path`` None means the memory's path when the version is committed."""

    id: str
    workspace_id: str
    memory_store_id: str
    memory_id: str
    path: str | None
    content_sha256: str
    content_size_bytes: int
    blob_key: str
    actor: Actor
    embedding: bytes
    """The content's vector (``runtime.memories.VECTOR_DTYPE``), for semantic search."""


@dataclass(frozen=True, slots=True)
class MemoryVector:
    """A memory's current version and its content's vector."""

    memory_id: str
    version_id: str
    path: str
    embedding: bytes


@dataclass(frozen=True, slots=True)
class MemoryWrite:
    """A committed write. ``conflict``: it was based on content that had changed
    meanwhile, so it is kept as ``version`` but ``memory`` still holds the other
    writer's content."""

    memory: MemoryRecord
    version: MemoryVersionRecord
    conflict: bool


@dataclass(frozen=True, slots=True)
class MemoryPrefix:
    """A directory marker in a memory listing: one or more memories below ``path``."""

    path: str


@dataclass(frozen=True, slots=True)
class MemoryListing:
    items: list[MemoryRecord | MemoryPrefix]
    has_next: bool


@dataclass(frozen=True, slots=True)
class VersionFilter:
    memory_id: str | None = None
    operation: str | None = None
    actors: tuple[Actor, ...] = ()
    """Versions written by each of these (so two different actors match nothing)."""
    created_gte: datetime | None = None
    created_lte: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoreFilter:
    include_archived: bool = False
    created_gte: datetime | None = None
    created_lte: datetime | None = None


@dataclass(frozen=True, slots=True)
class MountBase:
    """A memory file in a session's sandbox: the memory at ``path`` and the
    content hash the file had when it was last put there or written back."""

    memory_store_id: str
    path: str
    memory_id: str
    sha256: str


@dataclass(frozen=True, slots=True)
class MountClaim:
    """A write-back of the file at ``path`` of a session's mount: it commits only
    while the file's base hash is ``expected`` (None: the file has no base), and
    moves the base to what it wrote (drops it for a delete) in the same
    transaction, so a write-back cut short by a crash is never committed twice."""

    session_id: str
    path: str
    expected: str | None


MemoryStoreChange = Callable[[MemoryStoreRecord], dict[str, Any]]
"""Given the current row, the changed columns (``name``, ``description``, ``metadata``)."""


class MemoryStoreStore(Protocol):
    async def create_memory_store(
        self, workspace_id: str, name: str, description: str, metadata: dict[str, str]
    ) -> MemoryStoreRecord: ...

    async def get_memory_store(self, workspace_id: str, store_id: str) -> MemoryStoreRecord:
        """``NotFound`` for another workspace's store, as for an unknown one."""
        ...

    async def update_memory_store(
        self, workspace_id: str, store_id: str, change: MemoryStoreChange
    ) -> MemoryStoreRecord:
        """``Conflict`` (400) if the store is archived."""
        ...

    async def archive_memory_store(self, workspace_id: str, store_id: str) -> MemoryStoreRecord:
        """Idempotent: archiving twice keeps the first ``archived_at``."""
        ...

    async def delete_memory_store(self, workspace_id: str, store_id: str) -> None:
        """Deletes the store, its memories and versions at commit; their blobs are
        left to the purger (``memory_blobs_to_purge``)."""
        ...

    async def list_memory_stores(
        self, workspace_id: str, page: PageRequest, where: StoreFilter
    ) -> Page[MemoryStoreRecord]: ...

    async def begin_memory_version(self, new: NewVersion) -> None:
        """Records ``new`` pending (invisible) before its blob is written. ``NotFound``
        for an unknown store, ``Conflict`` (400) for an archived one."""
        ...

    async def commit_memory_create(
        self, workspace_id: str, version_id: str, mount: MountClaim | None = None
    ) -> MemoryWrite:
        """Creates the memory of pending version ``version_id`` at its path.
        ``Conflict`` ``memory_path_conflict_error`` if another memory has the path;
        ``Conflict`` ``MOUNT_MOVED`` if ``mount`` is given and its base moved on."""
        ...

    async def commit_memory_write(
        self,
        workspace_id: str,
        version_id: str,
        expected_sha256: str | None,
        keep_stale: bool,
        mount: MountClaim | None = None,
    ) -> MemoryWrite:
        """Makes pending version ``version_id`` its memory's content (and path).

        When ``expected_sha256`` is given and the memory's content hash differs
        (another writer came first): with ``keep_stale`` the version is kept as a
        version but the memory is left as it is, and the result says ``conflict``;
        without it, ``Conflict`` ``memory_precondition_failed_error`` and nothing
        is committed. ``NotFound`` if the memory is gone, ``Conflict`` on a path
        another memory has or an archived store. With ``mount``, the session's
        file base moves to this version's hash (stale or not)."""
        ...

    async def release_memory_version(self, version_id: str) -> None:
        """Gives up a pending version whose commit was refused: its blob goes to the
        purger. A committed version is left alone."""
        ...

    async def get_memory(
        self, workspace_id: str, store_id: str, memory_id: str
    ) -> MemoryRecord: ...

    async def list_memories(
        self,
        workspace_id: str,
        store_id: str,
        prefix: str,
        depth: int,
        after: str | None,
        limit: int,
    ) -> MemoryListing:
        """Memories below ``prefix`` by path (bytewise), after the path ``after``
        (a prefix marker's path skips everything below it). With ``depth`` > 0 the
        memories more than ``depth`` segments below ``prefix`` are rolled up into
        ``MemoryPrefix`` markers."""
        ...

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
        """Deletes the memory, recording a ``deleted`` version ``version_id``; its
        other versions stay. ``Conflict`` ``memory_precondition_failed_error`` when
        ``expected_sha256`` is given and differs. With ``mount``, the session's
        file base is dropped in the same transaction."""
        ...

    async def memory_mount_bases(self, session_id: str, store_id: str) -> list[MountBase]:
        """The bases of the session's files of the store's mount, by path."""
        ...

    async def put_memory_mount_bases(
        self, workspace_id: str, session_id: str, bases: list[MountBase]
    ) -> None:
        """Records ``bases`` (files just put in the session's sandbox), replacing
        any at the same paths."""
        ...

    async def drop_memory_mount_bases(
        self, session_id: str, store_id: str, paths: list[str]
    ) -> None:
        """Forgets the bases of ``paths`` (files removed from the sandbox)."""
        ...

    async def get_memory_version(
        self, workspace_id: str, store_id: str, version_id: str
    ) -> MemoryVersionRecord: ...

    async def list_memory_versions(
        self, workspace_id: str, store_id: str, where: VersionFilter, page: PageRequest
    ) -> Page[MemoryVersionRecord]:
        """Committed versions, by (created_at, id) in ``page.order``."""
        ...

    async def redact_memory_version(
        self, workspace_id: str, store_id: str, version_id: str, actor: Actor
    ) -> MemoryVersionRecord:
        """Clears the version's content, path, hash and size and releases its blob;
        the record, its author and time stay. Idempotent. ``Conflict`` for the
        current version of a memory that still exists."""
        ...

    async def memory_vectors(
        self, workspace_id: str, store_id: str, prefix: str
    ) -> list[MemoryVector]:
        """The vector of every memory below ``prefix`` at its current version."""
        ...

    async def memory_blobs_to_purge(
        self, pending_before: datetime, limit: int
    ) -> list[tuple[str, str]]:
        """(version id, blob key) of up to ``limit`` blobs to remove: released ones
        and those of versions left pending since before ``pending_before``."""
        ...

    async def forget_memory_blob(self, version_id: str) -> None:
        """Records that the version's blob is gone: a redacted version keeps its row,
        an uncommitted one or one of a deleted store loses it."""
        ...
