"""A sandbox's files as the file tools reach them (``HostedSandbox``): the
workspace, the mount tree at /mnt and the agent's skills, each a tree of its
own (``WorkspacePaths``), read and written off the event loop as the sandbox's
user, each call counting as activity."""

from __future__ import annotations

import contextlib
import os
from pathlib import PurePosixPath

from anyio import to_thread

from stead.sandbox import (
    WORKSPACE,
    DirListing,
    FileError,
    FileInfo,
    GlobResult,
    GrepResult,
    SandboxConfig,
)
from stead.sandbox.local import files, search
from stead.sandbox.local.paths import WorkspacePaths
from stead.sandbox_host.mounts import MOUNT_ROOT


class SandboxFiles:
    """Mixed into ``HostedSandbox``, which provides the state and ``activity``."""

    config: SandboxConfig
    paths: WorkspacePaths
    _skills: WorkspacePaths
    _mount_paths: WorkspacePaths

    def activity(self, *, wake: bool = True) -> contextlib.AbstractAsyncContextManager[None]:
        raise NotImplementedError

    def _tree(self, path: str) -> tuple[WorkspacePaths, str]:
        """The tree ``path`` is in, and ``path`` in it, so the file tools see what
        bash sees: the mount tree at /mnt (uploads, outputs, memory stores; the
        sandbox user's rights decide what may change there), the agent's skills,
        which the body binds read-only at /workspace/skills over the workspace
        directory, or the workspace."""
        if "\x00" in path:
            return self.paths, path
        pure = PurePosixPath(os.path.normpath(path))
        if pure.is_relative_to(MOUNT_ROOT):
            return self._mount_paths, path
        if not self.config.skills:
            return self.paths, path
        if pure.is_absolute():
            if not pure.is_relative_to(WORKSPACE):
                return self.paths, path
            pure = pure.relative_to(WORKSPACE)
        if pure.parts[:1] != ("skills",):
            return self.paths, path
        return self._skills, "/".join(pure.parts[1:]) or "."

    async def stat(self, path: str) -> FileInfo:
        async with self.activity():
            return await to_thread.run_sync(files.stat_path, *self._tree(path))

    async def list_dir(self, path: str) -> DirListing:
        async with self.activity():
            return await to_thread.run_sync(files.list_dir, *self._tree(path))

    async def read_file(self, path: str, *, max_bytes: int) -> bytes:
        async with self.activity():
            return await to_thread.run_sync(files.read_file, *self._tree(path), max_bytes)

    async def read_lines(self, path: str, start: int, end: int, *, max_bytes: int) -> bytes:
        async with self.activity():
            return await to_thread.run_sync(
                files.read_lines, *self._tree(path), start, end, max_bytes
            )

    async def write_file(self, path: str, data: bytes) -> None:
        tree, _ = self._tree(path)
        if tree is self._skills:
            raise FileError(path, "is read-only: the agent's skills are under /workspace/skills")
        async with self.activity():
            # As the sandbox's user (WorkspacePaths.uid): what it creates is theirs.
            await to_thread.run_sync(files.write_file, tree, path, data)

    async def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        tree, inner = (self.paths, None) if path is None else self._tree(path)
        async with self.activity():
            return await search.glob(tree, pattern, inner)

    async def grep(self, pattern: str, path: str | None = None) -> GrepResult:
        tree, inner = (self.paths, None) if path is None else self._tree(path)
        async with self.activity():
            return await search.grep(tree, pattern, inner)
