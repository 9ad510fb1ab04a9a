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
the API then refuses a session that needs mounts.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from stead.sandbox import ops
from stead.sandbox.client import HostClient
from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import FileNotFound, FileTooLarge, SandboxNotFound


@dataclass(frozen=True, slots=True)
class MountFile:
    """A file to put under a mount, at ``path`` relative to it."""

    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class MountedFile:
    """A regular file under a mount, at ``path`` relative to it."""

    path: str
    size: int
    sha256: str


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

    async def listing(self, sandbox_id: str, mount: str) -> list[MountedFile]:
        """The regular files under ``mount``, by path; empty if there is no
        such mount or sandbox. Links and special files are not listed."""
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


Route = Callable[[str], Awaitable[tuple[HostClient, int | None]]]
"""A sandbox id -> the client of the host holding it, and its placement."""


class HostMounts:
    """``SandboxMounts`` over the host protocol, on the host ``route`` names."""

    def __init__(self, route: Route) -> None:
        self._route = route

    async def put(
        self,
        sandbox_id: str,
        config: SandboxConfig,
        mount: str,
        files: Sequence[MountFile],
        *,
        writable: bool,
    ) -> None:
        client, placement = await self._route(sandbox_id)
        request = ops.PutMount(
            sandbox_id=sandbox_id,
            config=config.to_json(),
            placement=placement,
            mount=mount,
            files=[ops.MountFile(path=f.path, data=f.data) for f in files],
            writable=writable,
        )
        await client.call(request)

    async def listing(self, sandbox_id: str, mount: str) -> list[MountedFile]:
        client, placement = await self._route(sandbox_id)
        try:
            reply = await client.call(
                ops.ListMount(sandbox_id=sandbox_id, placement=placement, mount=mount)
            )
        except SandboxNotFound:
            return []
        return [MountedFile(f.path, f.size, f.sha256) for f in reply.files]

    async def read(self, sandbox_id: str, mount: str, path: str, *, max_bytes: int) -> bytes:
        client, placement = await self._route(sandbox_id)
        request = ops.ReadMount(
            sandbox_id=sandbox_id, placement=placement, mount=mount, path=path, max_bytes=max_bytes
        )
        try:
            reply = await client.call(request)
        except SandboxNotFound:
            raise FileNotFound(f"{mount}/{path}") from None
        data: bytes = reply.data
        return data

    async def put_stream(
        self,
        sandbox_id: str,
        config: SandboxConfig,
        mount: str,
        path: str,
        chunks: AsyncIterable[bytes],
        *,
        writable: bool,
    ) -> None:
        client, placement = await self._route(sandbox_id)
        offset = 0
        async for data, last in _parts(chunks, ops.MOUNT_PART_BYTES):
            request = ops.PutMountPart(
                sandbox_id=sandbox_id,
                config=config.to_json(),
                placement=placement,
                mount=mount,
                path=path,
                offset=offset,
                data=data,
                last=last,
                writable=writable,
            )
            await client.call(request)
            offset += len(data)

    async def read_stream(
        self, sandbox_id: str, mount: str, path: str, *, max_bytes: int
    ) -> AsyncIterator[bytes]:
        client, placement = await self._route(sandbox_id)
        offset = 0
        while True:
            request = ops.ReadMountPart(
                sandbox_id=sandbox_id,
                placement=placement,
                mount=mount,
                path=path,
                offset=offset,
                length=ops.MOUNT_PART_BYTES,
            )
            try:
                reply = await client.call(request)
            except SandboxNotFound:
                raise FileNotFound(f"{mount}/{path}") from None
            if reply.size > max_bytes:
                raise FileTooLarge(f"{mount}/{path}", reply.size, max_bytes)
            data: bytes = reply.data
            if data:
                yield data
            offset += len(data)
            if len(data) < ops.MOUNT_PART_BYTES or offset >= reply.size:
                return

    async def remove(self, sandbox_id: str, mount: str, paths: Sequence[str] | None = None) -> None:
        client, placement = await self._route(sandbox_id)
        request = ops.RemoveMount(
            sandbox_id=sandbox_id,
            placement=placement,
            mount=mount,
            paths=None if paths is None else list(paths),
        )
        try:
            await client.call(request)
        except SandboxNotFound:
            return


async def _parts(chunks: AsyncIterable[bytes], size: int) -> AsyncIterator[tuple[bytes, bool]]:
    """``chunks`` regrouped into parts of ``size`` bytes (the final one shorter,
    and one empty part for no bytes at all), each with whether it is the last."""
    held = bytearray()
    ready: bytes | None = None
    async for chunk in chunks:
        held += chunk
        while len(held) >= size:
            if ready is not None:
                yield ready, False
            ready, held = bytes(held[:size]), held[size:]
    if ready is not None and held:
        yield ready, False
        ready = None
    yield (bytes(held) if ready is None else ready), True
