"""``MemoryKeeper``: memory content in the blob store, paths, hashes and versions in the store.

Every write of a memory is a new immutable version with a blob of its own
(``memories/<workspace>/<store>/<version>``), named by a row before it is
written, as ``FileKeeper`` does for files:

* the version is begun pending (invisible), its blob written, then the version
  committed and the memory moved to it, in one transaction that checks the
  content-hash rule;
* a commit that is refused (a stale hash, a taken path) releases the version:
  its blob is removed now or, if the blob store fails, by the purger;
* a writer that dies leaves a pending version that the purger releases after
  ``upload_grace`` and removes, as it removes the blobs of redacted versions and
  deleted stores.

Reading and listing never touch a sandbox: only the store and the blob store.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import anyio
from anyio import to_thread
from anyio.abc import TaskStatus

from stead.blobs import BlobError
from stead.ids import new_id
from stead.runtime.clock import Clock
from stead.runtime.embedder import Embedder
from stead.runtime.purging import PurgeTerms, purge_every, purge_in_batches
from stead.store import (
    PRECONDITION_FAILED,
    Actor,
    Conflict,
    MemoryRecord,
    MemoryStoreStore,
    MemoryVector,
    MemoryVersionRecord,
    MemoryWrite,
    MountClaim,
    NewVersion,
    NotFound,
    precondition_failed,
    store_archived,
)

if TYPE_CHECKING:
    from stead.blobs import BlobStore
    from stead.runtime.minilm import Vectors

log = logging.getLogger("stead.runtime.memories")

KEY_PREFIX = "memories"
VECTOR_DTYPE = "float16"
"""How vectors are kept: half the bytes of float32 (a search reads every one),
and rankings by cosine barely move (unit vectors, 3 significant digits)."""
RENAME_ATTEMPTS = 3
"""A rename copies the current content; it is retried if a write lands meanwhile."""


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A memory whose current content is close to a query (cosine ``score``)."""

    memory_id: str
    version_id: str
    path: str
    score: float


class MemoryKeeper:
    def __init__(
        self,
        store: MemoryStoreStore,
        blobs: Callable[[], BlobStore],
        embedder: Embedder,
        *,
        purge_interval: float,
        upload_grace: float,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._blobs = blobs
        self._embedder = embedder
        self._terms = PurgeTerms.of(purge_interval, upload_grace, clock)

    async def create(
        self,
        workspace_id: str,
        store_id: str,
        path: str,
        content: str,
        actor: Actor,
        mount: MountClaim | None = None,
    ) -> MemoryWrite:
        """A new memory at ``path`` (``Conflict`` ``memory_path_conflict_error`` if
        one is there; ``NotFound``/``Conflict`` for an unknown or archived store).
        ``mount``: a session's write-back (``MemoryStoreStore.commit_memory_create``)."""
        staged = await self._stage(workspace_id, store_id, new_id("memory"), path, content, actor)
        return await self._commit(
            staged,
            lambda version_id: self._store.commit_memory_create(workspace_id, version_id, mount),
        )

    async def write(
        self,
        workspace_id: str,
        store_id: str,
        memory_id: str,
        *,
        content: str | None,
        path: str | None = None,
        expected_sha256: str | None,
        actor: Actor,
        keep_stale: bool,
        mount: MountClaim | None = None,
    ) -> MemoryWrite:
        """Writes a memory's new ``content`` (None: unchanged) and ``path`` (None:
        unchanged) under the content-hash rule, as a new version.

        ``expected_sha256`` is the hash of the content the write was based on
        (None: unconditional). If the memory's content changed since, the write is
        stale: with ``keep_stale`` (a mount's write-back) its content is still kept
        as a version, the memory keeps the other writer's content, and the result
        says ``conflict`` so the caller can tell the writer; without it (the API's
        ``precondition``) it is ``Conflict`` ``memory_precondition_failed_error``
        and nothing is kept. A write that changes nothing makes no version (and,
        with ``mount``, leaves the session's file base as it is).
        """
        current = await self._store.get_memory(workspace_id, store_id, memory_id)
        if expected_sha256 not in (None, current.content_sha256) and not keep_stale:
            raise precondition_failed("precondition.content_sha256", current)
        same_content = content is None or _sha256(content) == current.content_sha256
        if same_content and path in (None, current.path):
            # No version to commit, so no commit to refuse it: checked here.
            store = await self._store.get_memory_store(workspace_id, store_id)
            if store.archived_at is not None:
                raise store_archived(store_id)
            version = await self._store.get_memory_version(
                workspace_id, store_id, current.version_id
            )
            return MemoryWrite(current, version, False)
        if content is None:
            assert path is not None  # a rename: same_content and a new path
            return await self._rename(current, workspace_id, path, expected_sha256, actor)
        staged = await self._stage(workspace_id, store_id, memory_id, path, content, actor)
        return await self._commit(
            staged,
            lambda version_id: self._store.commit_memory_write(
                workspace_id, version_id, expected_sha256, keep_stale, mount
            ),
        )

    async def _rename(
        self,
        current: MemoryRecord,
        workspace_id: str,
        path: str,
        expected_sha256: str | None,
        actor: Actor,
    ) -> MemoryWrite:
        """Moves ``current`` to ``path`` as a new version holding the same content.
        The commit requires the content it copied, so a write that lands meanwhile
        is never undone: the rename then starts again (unless the caller set a
        precondition, which that write made fail)."""
        store_id = current.memory_store_id
        for attempt in range(RENAME_ATTEMPTS):
            if attempt:
                current = await self._store.get_memory(workspace_id, store_id, current.id)
            content = await self.content(current)
            assert content is not None  # a memory's current version always has content
            staged = await self._stage(workspace_id, store_id, current.id, path, content, actor)
            try:
                return await self._commit(
                    staged,
                    partial(
                        self._store.commit_memory_write,
                        workspace_id,
                        expected_sha256=current.content_sha256,
                        keep_stale=False,
                    ),
                )
            except Conflict as exc:
                if exc.code != PRECONDITION_FAILED or expected_sha256 is not None:
                    raise
        raise Conflict(f"memory {current.id} kept changing while being renamed; try again")

    async def delete(
        self,
        workspace_id: str,
        store_id: str,
        memory_id: str,
        expected_sha256: str | None,
        actor: Actor,
        mount: MountClaim | None = None,
    ) -> None:
        """Deletes the memory, recording a ``deleted`` version; its versions and
        their content stay until redacted or the store is deleted."""
        await self._store.delete_memory(
            workspace_id,
            store_id,
            memory_id,
            expected_sha256,
            actor,
            new_id("memory_version"),
            mount,
        )

    async def redact(
        self, workspace_id: str, store_id: str, version_id: str, actor: Actor
    ) -> MemoryVersionRecord:
        """Redacts the version (``MemoryStoreStore.redact_memory_version``) and removes
        its content from the blob store now, or through the purger if that fails."""
        before = await self._store.get_memory_version(workspace_id, store_id, version_id)
        record = await self._store.redact_memory_version(workspace_id, store_id, version_id, actor)
        if before.blob_key is not None:
            with anyio.CancelScope(shield=True):  # bounded by both stores' timeouts
                await self._remove(version_id, before.blob_key)
        return record

    async def search(
        self, workspace_id: str, store_id: str, query: str, limit: int, prefix: str = "/"
    ) -> list[SearchHit]:
        """The ``limit`` memories below ``prefix`` whose current content is most like
        ``query``, best first. Reads the vectors from the store; the comparison
        runs off the event loop."""
        found = await self.search_stores(workspace_id, [store_id], query, limit, prefix)
        return [hit for _, hit in found]

    async def search_stores(
        self,
        workspace_id: str,
        store_ids: Sequence[str],
        query: str,
        limit: int,
        prefix: str = "/",
        *,
        missing_ok: bool = False,
    ) -> list[tuple[str, SearchHit]]:
        """``search`` across several stores at once, the query embedded once:
        (store id, hit), best first. ``missing_ok``: a store that is gone is
        passed over instead of raising ``NotFound``."""
        found: list[tuple[str, MemoryVector]] = []
        for store_id in store_ids:
            try:
                vectors = await self._store.memory_vectors(workspace_id, store_id, prefix)
            except NotFound:
                if not missing_ok:
                    raise
                continue
            found += [(store_id, vector) for vector in vectors]
        if not found:
            return []
        wanted = (await self._embedder.embed([query]))[0]
        scores = await to_thread.run_sync(_scores, [v for _, v in found], wanted)
        best = heapq.nlargest(limit, range(len(found)), key=scores.__getitem__)
        return [
            (
                found[i][0],
                SearchHit(
                    found[i][1].memory_id, found[i][1].version_id, found[i][1].path, scores[i]
                ),
            )
            for i in best
        ]

    async def content(self, record: MemoryRecord | MemoryVersionRecord) -> str | None:
        """The text a memory or a version holds (None for a redacted or deleted one)."""
        if record.blob_key is None:
            return None
        return (await self._blobs().get_bytes(record.blob_key)).decode()

    async def _stage(
        self,
        workspace_id: str,
        store_id: str,
        memory_id: str,
        path: str | None,
        content: str,
        actor: Actor,
    ) -> tuple[str, str]:
        """Begins a version of ``content`` and writes its blob: (version id, blob key)."""
        data = content.encode()
        vector = (await self._embedder.embed([content]))[0]
        version_id = new_id("memory_version")
        key = f"{KEY_PREFIX}/{workspace_id}/{store_id}/{version_id}"
        new = NewVersion(
            version_id,
            workspace_id,
            store_id,
            memory_id,
            path,
            _sha256(content),
            len(data),
            key,
            actor,
            vector.astype(VECTOR_DTYPE).tobytes(),
        )
        await self._store.begin_memory_version(new)
        await self._blobs().put_bytes(key, data)
        return version_id, key

    async def _commit(
        self, staged: tuple[str, str], commit: Callable[[str], Awaitable[MemoryWrite]]
    ) -> MemoryWrite:
        version_id, key = staged
        try:
            return await commit(version_id)
        except (Conflict, NotFound):
            # Refused: the version is given up and its blob removed now (or, if
            # the blob store fails, by the purger). Bounded by both stores' timeouts.
            with anyio.CancelScope(shield=True):
                await self._store.release_memory_version(version_id)
                await self._remove(version_id, key)
            raise

    async def purge(self) -> int:
        """Removes the blobs of released versions (refused writes, redactions,
        deleted stores) and of versions pending for longer than the grace; returns
        how many went. Failures stay for the next round."""
        return await purge_in_batches(
            self._terms,
            self._store.memory_blobs_to_purge,
            lambda named: self._remove(*named),
        )

    async def _remove(self, version_id: str, key: str) -> bool:
        try:
            await self._blobs().delete(key)
        except BlobError as exc:
            log.warning("memory version %s: blob not removed yet, will retry: %s", version_id, exc)
            return False
        await self._store.forget_memory_blob(version_id)
        return True

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Purges every ``purge_interval`` until cancelled (``purging.purge_every``)."""
        await purge_every(self._terms, self.purge, task_status)


def _scores(vectors: list[MemoryVector], wanted: Vectors) -> list[float]:
    import numpy as np  # loaded with the model, never at start

    matrix = np.frombuffer(b"".join(v.embedding for v in vectors), dtype=VECTOR_DTYPE)
    scores: list[float] = (matrix.reshape(len(vectors), -1).astype(np.float32) @ wanted).tolist()
    return scores


def _sha256(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()
