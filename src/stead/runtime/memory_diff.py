"""What differs in a memory mount (``memory_mounts.py``), worked out from the
mount's files (path and content hash, as the host lists them), their bases and
the store's memories: pure functions, no I/O.

A file whose hash differs from its base's is the agent's change; a file with no
base is one the agent made; a base with no file is a file the agent removed.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from stead.mount_paths import directories_of, is_temporary
from stead.sandbox import MountedFile
from stead.store import MemoryRecord, MountBase


@dataclass(frozen=True, slots=True)
class Change:
    """A file that differs from its base: made (no base), changed, or removed
    (``sha256`` None). ``path`` is the memory path (``/`` + the file's path in the mount)."""

    kind: Literal["created", "modified", "deleted"]
    path: str
    base: MountBase | None
    sha256: str | None


def changes(
    held: Iterable[MountedFile], bases: Iterable[MountBase], *, whole: bool = True
) -> list[Change]:
    """What the agent changed: ``held`` (the mount's files now) against ``bases``.
    A file missing from ``held`` is a deletion only when ``held`` is ``whole``
    (a listing cut short lists some files, not all)."""
    by_path = {b.path: b for b in bases}
    found: list[Change] = []
    seen = set()
    for f in held:
        if _hidden(f.path):
            continue
        path = "/" + f.path
        seen.add(path)
        base = by_path.get(path)
        if base is None:
            found.append(Change("created", path, None, f.sha256))
        elif base.sha256 != f.sha256:
            found.append(Change("modified", path, base, f.sha256))
    if whole:
        found += [Change("deleted", p, b, None) for p, b in by_path.items() if p not in seen]
    return sorted(found, key=lambda c: c.path)


def _hidden(path: str) -> bool:
    """A file the host is writing, under its temporary name (``mount_paths``):
    only that exact form, so a memory named like it otherwise is the agent's."""
    return is_temporary(posixpath.basename(path))


@dataclass(frozen=True, slots=True)
class StagePlan:
    """What staging does to one mount."""

    put: list[MemoryRecord]
    """Memories whose current content goes into their file."""
    record: list[MountBase]
    """Files that already hold their memory's content: only their base is recorded."""
    remove: list[str]
    """Memory paths whose file goes (their memory is gone), with their base."""
    drop: list[str]
    """Bases with neither a memory nor a file."""
    held_back: list[str]
    """Memory paths that cannot be files, as other memories are below them
    (``/a`` beside ``/a/b``): not put, and the agent is told."""


def stage_plan(
    current: Sequence[MemoryRecord],
    held: Iterable[MountedFile],
    bases: Iterable[MountBase],
    *,
    writable: bool,
    whole: bool = True,
) -> StagePlan:
    """Makes a mount show ``current`` (the store's memories now), except for
    files with an agent's change that is not written back (``writable`` only).
    When ``held`` is not ``whole`` (a listing cut short), a writable mount's
    paths it does not list are left as they are: such a file may be there with
    an agent's change, and its base is kept for it."""
    files = {"/" + f.path: f for f in held if not _hidden(f.path)}
    by_path = {b.path: b for b in bases}

    def agents(path: str) -> bool:
        """The file holds an agent's change that is not written back."""
        found, base = files.get(path), by_path.get(path)
        return writable and found is not None and (base is None or found.sha256 != base.sha256)

    unknown = writable and not whole  # a path ``held`` does not list may hold an agent's file
    directories = directories_of(m.path for m in current)
    plan = StagePlan([], [], [], [], [])
    for memory in current:
        if memory.path in directories:
            plan.held_back.append(memory.path)
            continue
        found, base = files.get(memory.path), by_path.get(memory.path)
        wanted = MountBase(memory.memory_store_id, memory.path, memory.id, memory.content_sha256)
        if found is not None and found.sha256 == memory.content_sha256:
            if base != wanted:
                plan.record.append(wanted)
        elif found is None and unknown:
            continue
        elif not agents(memory.path):
            plan.put.append(memory)
    paths = {m.path for m in current} - directories
    plan.remove.extend(p for p in files if p not in paths and not agents(p))
    if not unknown:
        plan.drop.extend(p for p in by_path if p not in paths and p not in files)
    return plan
