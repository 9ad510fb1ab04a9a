"""``MemoryMounts``: a session's memory store resources in its sandbox, and what
the agent changes there back into the memory store.

Each ``memory_store`` resource is a directory at its ``mount_path``
(``/mnt/memory/<slug>``) holding one file per memory, at the memory's path.
A ``read_only`` one is root's (the agent can read, not change it); a
``read_write`` one is the sandbox user's.

Every file has a base in the store (``MountBase``): the memory and the content
hash the file had when it was put there or last written back. A file that
differs from its base is the agent's change (``changes``):

* Write-back (after each tool call that can change files, before staging, at
  each turn's end) makes each change a new memory version by the session
  (``session_actor``): a new file creates a memory, a changed one writes the
  memory with the base hash as its precondition and ``keep_stale``, a removed
  one deletes the memory under the same precondition. The commit moves the
  file's base in the same transaction (``MountClaim``), so a write-back cut
  short by a crash is done once by the next one, never twice.
* Conflicts (the content-hash rule): when the memory changed in the API since
  the file's base, the memory keeps the content committed first (the other
  writer's) and the agent's content is kept as a version beside it; the file
  is put back to the current content and the agent is told, with both version
  ids, in the result of the tool call that made the change. A removed file
  whose memory changed is not deleted: the file comes back with the current
  content. A file at a path a memory took meanwhile is kept as a version of
  that memory in the same way.
* A mount's files count as the agent's only in the mount tree its bases were
  recorded for (``MARKERS``): a sandbox made again (after a destroy) starts
  from the API's content, and its empty mount deletes nothing.
* Staging (at each turn's first sandbox call) puts what the API holds now:
  memories whose file is missing or unchanged by the agent get the current
  content; files whose memory went away are removed. A file with an agent's
  change that could not be written back (too large, not UTF-8, a path the API
  refuses) is left as the agent made it, and the agent is told why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from stead.failpoints import FailPoints
from stead.mount_paths import LISTED_ENTRIES
from stead.runtime.memories import MemoryKeeper
from stead.runtime.memory_diff import Change, changes, stage_plan
from stead.sandbox import (
    FileNotFound,
    FileTooLarge,
    MountFile,
    NotARegularFile,
    SandboxConfig,
    SandboxMounts,
)
from stead.schemas import RequestError, memories
from stead.store import (
    MOUNT_MOVED,
    PATH_CONFLICT,
    PRECONDITION_FAILED,
    Actor,
    Conflict,
    MemoryRecord,
    MemoryStoreStore,
    MemoryWrite,
    MountBase,
    MountClaim,
    NotFound,
    SessionRecord,
)

log = logging.getLogger("stead.runtime.memory_mounts")

NO_BASE = ""
"""The precondition of a file the agent made where a memory now is: it was
based on no content, so any content the memory holds makes it stale."""
PAGE = 1000
PUT_BATCH = 64
"""Memories put in one host call: at most 6.4 MiB, well within one protocol frame."""
MARKERS = "/mnt/.stead/memory"
"""A root-owned file per store, named by its id, put once a mount's files and
their bases are recorded. A sandbox destroyed and made again has a new, empty
mount tree without them: its missing files are not the agent's deletions."""


@dataclass(frozen=True, slots=True)
class MemoryMount:
    """One ``memory_store`` resource of a session."""

    memory_store_id: str
    mount_path: str
    writable: bool

    def file(self, path: str) -> str:
        """Where the memory at ``path`` is inside the sandbox."""
        return self.mount_path + path


@dataclass(frozen=True, slots=True)
class MemorySession:
    """A session's memory store resources (they never change after its create)."""

    id: str
    workspace_id: str
    mounts: tuple[MemoryMount, ...]

    @classmethod
    def of(cls, session: SessionRecord) -> MemorySession:
        mounts = tuple(
            MemoryMount(
                str(r["memory_store_id"]), str(r["mount_path"]), r.get("access") != "read_only"
            )
            for r in session.resources
            if r.get("type") == "memory_store"
        )
        return cls(session.id, session.workspace_id, mounts)

    @property
    def writable(self) -> bool:
        return any(m.writable for m in self.mounts)


class MemoryMounts:
    def __init__(
        self,
        store: MemoryStoreStore,
        mounts: SandboxMounts,
        keeper: MemoryKeeper,
        failpoints: FailPoints,
    ) -> None:
        self._store = store
        self._mounts = mounts
        self._keeper = keeper
        self._failpoints = failpoints

    async def stage(self, session: MemorySession, config: SandboxConfig) -> list[str]:
        """Writes back what the agent changed, then makes each mount show its
        store as it is now. Returns what the agent must be told."""
        notes = await self.write_back(session, config)
        for mount in session.mounts:
            notes += await self._stage_one(session, config, mount)
        return notes

    async def _marked(self, session_id: str) -> set[str]:
        """The stores whose mount this sandbox's mount tree has held since their
        bases were recorded (``MARKERS``)."""
        return {f.path for f in (await self._mounts.listing(session_id, MARKERS)).files}

    async def _stage_one(
        self, session: MemorySession, config: SandboxConfig, mount: MemoryMount
    ) -> list[str]:
        """Makes the mount show its store; what the agent must be told."""
        store_id = mount.memory_store_id
        await self._mounts.put(session.id, config, mount.mount_path, [], writable=mount.writable)
        try:
            current = await self._current(session.workspace_id, store_id)
        except NotFound:
            log.warning("memory store %s of session %s is gone", store_id, session.id)
            current = []
        held = await self._mounts.listing(session.id, mount.mount_path)
        bases = await self._store.memory_mount_bases(session.id, store_id)
        marked = store_id in await self._marked(session.id)
        if not marked:
            # A new mount tree (a new or remade sandbox): the bases describe files
            # it never held, and nothing in it is the agent's; the API's content wins.
            await self._store.drop_memory_mount_bases(session.id, store_id, [b.path for b in bases])
            bases = []
        plan = stage_plan(
            current, held.files, bases, writable=mount.writable and marked, whole=not held.truncated
        )
        # Removed first: a memory may take the place of a directory that the
        # removed files leave empty, or of a file that gives way to a directory.
        if plan.remove:
            await self._mounts.remove(session.id, mount.mount_path, [p[1:] for p in plan.remove])
        gone = plan.remove + plan.drop
        if gone:
            await self._store.drop_memory_mount_bases(session.id, store_id, gone)
        if plan.put:
            await self._put(session, config, mount, plan.put)
        if plan.record:
            await self._store.put_memory_mount_bases(session.workspace_id, session.id, plan.record)
        if not marked:  # last: a crash before it stages this mount afresh again
            await self._mounts.put(
                session.id, config, MARKERS, [MountFile(store_id, b"")], writable=False
            )
        return [
            f"The memory {path} is not in {mount.mount_path}: other memories are below "
            f"{path}/, so it cannot be a file there."
            for path in plan.held_back
        ]

    async def _current(self, workspace_id: str, store_id: str) -> list[MemoryRecord]:
        found: list[MemoryRecord] = []
        after = None
        while True:
            page = await self._store.list_memories(workspace_id, store_id, "/", 0, after, PAGE)
            found += [m for m in page.items if isinstance(m, MemoryRecord)]
            if not page.has_next or not page.items:
                return found
            after = page.items[-1].path

    async def _put(
        self,
        session: MemorySession,
        config: SandboxConfig,
        mount: MemoryMount,
        memories: list[MemoryRecord],
    ) -> None:
        """Puts each memory's current content in its file, then records its base
        (in that order: a crash between leaves a file equal to its memory, which
        the next write-back finds unchanged)."""
        for start in range(0, len(memories), PUT_BATCH):
            batch = memories[start : start + PUT_BATCH]
            files = []
            for memory in batch:
                content = await self._keeper.content(memory)
                assert content is not None  # a memory's current version has content
                files.append(MountFile(memory.path[1:], content.encode()))
            await self._mounts.put(
                session.id, config, mount.mount_path, files, writable=mount.writable
            )
            bases = [MountBase(m.memory_store_id, m.path, m.id, m.content_sha256) for m in batch]
            await self._store.put_memory_mount_bases(session.workspace_id, session.id, bases)

    async def write_back(self, session: MemorySession, config: SandboxConfig) -> list[str]:
        """Makes what the agent changed in the session's read-write mounts new
        memory versions; what the agent must be told (conflicts, refusals)."""
        notes: list[str] = []
        marked = await self._marked(session.id)
        for mount in session.mounts:
            if not mount.writable or mount.memory_store_id not in marked:
                continue  # an unmarked mount holds nothing of the agent's yet
            held = await self._mounts.listing(session.id, mount.mount_path)
            bases = await self._store.memory_mount_bases(session.id, mount.memory_store_id)
            if held.truncated:
                notes.append(
                    f"{mount.mount_path} holds more than {LISTED_ENTRIES} files and "
                    "directories, more than stead lists: changes to the files it listed "
                    "are saved, removed files are not deleted from the memory store, and "
                    "files it did not list are neither saved nor updated. Remove files "
                    "and directories there to bring it under the limit."
                )
            for change in changes(held.files, bases, whole=not held.truncated):
                note = await self._write_one(session, config, mount, change)
                if note is not None:
                    notes.append(note)
        return notes

    async def _write_one(
        self, session: MemorySession, config: SandboxConfig, mount: MemoryMount, change: Change
    ) -> str | None:
        expected = None if change.base is None else change.base.sha256
        writer = _Writer(
            self._store, self._keeper, session, mount, MountClaim(session.id, change.path, expected)
        )
        try:
            if change.kind == "deleted":
                assert change.base is not None
                await writer.delete(change.base)
                written = None
            else:
                content = await self._read(session.id, mount, change.path)
                if isinstance(content, _Refused):
                    return f"Memory not saved: {mount.file(change.path)}: {content.reason}."
                written = await writer.save(content, change.base)
        except Conflict as exc:
            if exc.code == MOUNT_MOVED:
                return None  # another write-back of this very change committed it
            if exc.code == PRECONDITION_FAILED and change.kind == "deleted":
                assert change.base is not None
                await self._restore(session, config, mount, change.base.memory_id)
                return (
                    f"Memory conflict: {mount.file(change.path)} changed in the memory store "
                    "since you last read it, so it was not deleted; the file is back with "
                    "the current content."
                )
            return f"Memory not saved: {mount.file(change.path)}: {exc}."
        except NotFound as exc:
            return f"Memory not saved: {mount.file(change.path)}: {exc}."
        self._failpoints.hit("memories.after_writeback")
        if written is None or not written.conflict:
            return None
        await self._restore(session, config, mount, written.memory.id)
        return (
            f"Memory conflict: {mount.file(change.path)} changed in the memory store since "
            f"you last read it. Your content is kept as memory version {written.version.id}, "
            f"but the memory keeps the other writer's content (version "
            f"{written.memory.version_id}), which the file now shows: merge the two and "
            "write the file again if yours should win."
        )

    async def _read(self, session_id: str, mount: MemoryMount, path: str) -> str | _Refused:
        try:
            memories.check_path("path", path)
        except RequestError as exc:
            return _Refused(f"the memory store refuses this path ({exc})")
        try:
            data = await self._mounts.read(
                session_id, mount.mount_path, path[1:], max_bytes=memories.MAX_CONTENT_BYTES
            )
        except FileTooLarge:
            return _Refused(f"a memory holds at most {memories.MAX_CONTENT_BYTES} bytes")
        except (FileNotFound, NotARegularFile):
            return _Refused("it changed while being read; it is saved after the next tool call")
        try:
            return data.decode()
        except UnicodeDecodeError:
            return _Refused("a memory holds UTF-8 text only")

    async def _restore(
        self, session: MemorySession, config: SandboxConfig, mount: MemoryMount, memory_id: str
    ) -> None:
        """Puts a memory's current content back in its file (after a conflict)."""
        try:
            memory = await self._store.get_memory(
                session.workspace_id, mount.memory_store_id, memory_id
            )
        except NotFound:
            return  # gone meanwhile: the next staging removes its file
        await self._put(session, config, mount, [memory])


@dataclass(frozen=True, slots=True)
class _Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class _Writer:
    """One change's write-back, under its ``MountClaim``."""

    store: MemoryStoreStore
    keeper: MemoryKeeper
    session: MemorySession
    mount: MemoryMount
    claim: MountClaim

    @property
    def actor(self) -> Actor:
        return Actor("session_actor", self.session.id)

    async def save(self, content: str, base: MountBase | None) -> MemoryWrite | None:
        if base is not None:
            try:
                return await self._write(base.memory_id, content, base.sha256)
            except NotFound as exc:
                if exc.kind != "memory":
                    raise
                # Deleted in the API since: the agent's content becomes a memory again.
        try:
            return await self.keeper.create(
                self.session.workspace_id,
                self.mount.memory_store_id,
                self.claim.path,
                content,
                self.actor,
                self.claim,
            )
        except Conflict as exc:
            if exc.code != PATH_CONFLICT:
                raise
            other = (exc.details or {})["conflicting_memory_id"]
            return await self._write(other, content, NO_BASE)

    async def _write(self, memory_id: str, content: str, expected: str) -> MemoryWrite:
        written = await self.keeper.write(
            self.session.workspace_id,
            self.mount.memory_store_id,
            memory_id,
            content=content,
            expected_sha256=expected,
            actor=self.actor,
            keep_stale=True,
            mount=self.claim,
        )
        if not written.conflict:
            # A write that changed nothing (the memory holds this content already)
            # committed nothing, so no commit moved the base: it moves here.
            base = MountBase(
                self.mount.memory_store_id,
                self.claim.path,
                memory_id,
                written.memory.content_sha256,
            )
            await self.store.put_memory_mount_bases(
                self.session.workspace_id, self.session.id, [base]
            )
        return written

    async def delete(self, base: MountBase) -> None:
        try:
            await self.keeper.delete(
                self.session.workspace_id,
                self.mount.memory_store_id,
                base.memory_id,
                base.sha256,
                self.actor,
                self.claim,
            )
        except NotFound as exc:
            if exc.kind != "memory":
                raise
            await self.store.drop_memory_mount_bases(
                self.session.id, self.mount.memory_store_id, [base.path]
            )
