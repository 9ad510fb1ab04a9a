"""The mounts seam: API content put at paths under ``/mnt`` inside a sandbox.

A mount is a directory inside the sandbox (``/mnt/session/uploads``,
``/mnt/session/outputs``, later ``/mnt/memory/<slug>``) holding files the brain
puts there, read-only or writable for the sandbox user, and what the sandbox
wrote there, which the brain lists (with each file's sha256) and reads back.
Paths are checked by the host: nothing reaches outside the mount, and a link
the sandbox makes is never followed. Mount ops never wake a sleeping sandbox,
and mount content is not in its snapshots: the brain puts it again before the
sandbox serves (``stead.sandbox_host.mounts`` says why).

A provider that cannot mount answers None from ``SandboxProvider.mounts``;
the API then refuses a session that needs mounts. The host's mounts, over the
host protocol, are ``host_mounts.HostMounts``.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from stead.sandbox.config import SandboxConfig


@dataclass(frozen=True, slots=True)
class MountFile:
    """A file to put under a mount, at ``path`` relative to it."""

    path: str
    data: bytes
    executable: bool = False
    """Read-only, it is 0555 rather than 0444 (a skill's script zipped so)."""


@dataclass(frozen=True, slots=True)
class MountedFile:
    """A regular file under a mount, at ``path`` relative to it."""

    path: str
    size: int
    sha256: str
    executable: bool = False
    """Its mode has an execute bit."""


@dataclass(frozen=True, slots=True)
class MountListing:
    """The regular files under a mount, by path."""

    files: list[MountedFile]
    truncated: bool = False
    """The host stopped at ``mount_paths.LISTED_ENTRIES`` entries: a file not
    in ``files`` may still be there. Nothing may be taken as removed then."""


class SandboxMounts(Protocol):
    async def put(
        self,
        sandbox_id: str,
        config: SandboxConfig,
        mount: str,
        files: Sequence[MountFile],
        *,
        writable: bool,
    ) -> None:
        """Puts ``files`` under the directory ``mount`` (made if missing, the
        sandbox made if new, never woken), replacing files at the same paths and
        leaving others. ``InvalidArgument`` for a path outside the mount or one
        with a link or a file in the way; nothing outside the mount changes."""
        ...

    async def listing(self, sandbox_id: str, mount: str) -> MountListing:
        """The regular files under ``mount``, by path; empty if there is no
        such mount or sandbox. Links, special files and names that are not
        UTF-8 (no stead file has one; none could be read by path) are not listed."""
        ...

    async def read(self, sandbox_id: str, mount: str, path: str, *, max_bytes: int) -> bytes:
        """One regular file under ``mount``: ``FileNotFound``, ``NotARegularFile``
        (a link, a directory), ``FileTooLarge``."""
        ...

    async def put_stream(
        self,
        sandbox_id: str,
        config: SandboxConfig,
        mount: str,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        writable: bool,
        executable: bool = False,
    ) -> None:
        """``put`` of one file of any size, its bytes in ``chunks``: it appears at
        ``path`` whole once the last chunk is in. A source that fails leaves
        nothing at ``path`` changed."""
        ...

    def read_stream(
        self, sandbox_id: str, mount: str, path: str, *, max_bytes: int
    ) -> AsyncIterator[bytes]:
        """``read`` of one file of any size up to ``max_bytes``, in chunks (the
        errors are raised as the chunks are read)."""
        ...

    async def remove(self, sandbox_id: str, mount: str, paths: Sequence[str] | None = None) -> None:
        """Removes ``paths`` under ``mount`` (None: the whole mount); missing
        ones, or a missing sandbox, are not an error."""
        ...
