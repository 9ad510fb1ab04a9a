"""``SandboxMounts`` over the host protocol (``mounts.py`` has the seam).

A server makes its ``HostMounts`` at start-up; the protocol (``ops``) is
imported by the first mount op, as the package's ``__getattr__`` says why.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeAlias

from stead.sandbox.config import SandboxConfig
from stead.sandbox.errors import FileNotFound, FileTooLarge, SandboxNotFound
from stead.sandbox.mounts import MountedFile, MountFile, MountListing

if TYPE_CHECKING:
    from stead.sandbox.client import HostClient

Route: TypeAlias = "Callable[[str], Awaitable[tuple[HostClient, int | None]]]"
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
        """Files of more than ``ops.MOUNT_PART_BYTES`` together go in several
        calls, and a larger one in parts (``put_stream``): one call of any size
        would cross a protocol frame's limit, which ends the host connection."""
        from stead.sandbox import ops

        client, placement = await self._route(sandbox_id)
        large = [f for f in files if len(f.data) > ops.MOUNT_PART_BYTES]
        small = [f for f in files if len(f.data) <= ops.MOUNT_PART_BYTES]
        for batch in _batches(small, ops.MOUNT_PART_BYTES):
            request = ops.PutMount(
                sandbox_id=sandbox_id,
                config=config.to_json(),
                placement=placement,
                mount=mount,
                files=[
                    ops.MountFile(path=f.path, data=f.data, executable=f.executable) for f in batch
                ],
                writable=writable,
            )
            await client.call(request)
        for file in large:
            await self.put_stream(
                sandbox_id,
                config,
                mount,
                file.path,
                _once(file.data),
                writable=writable,
                executable=file.executable,
            )

    async def listing(self, sandbox_id: str, mount: str) -> MountListing:
        from stead.sandbox import ops

        client, placement = await self._route(sandbox_id)
        try:
            reply = await client.call(
                ops.ListMount(sandbox_id=sandbox_id, placement=placement, mount=mount)
            )
        except SandboxNotFound:
            return MountListing([])
        files = [MountedFile(f.path, f.size, f.sha256, f.executable) for f in reply.files]
        return MountListing(files, reply.truncated)

    async def read(self, sandbox_id: str, mount: str, path: str, *, max_bytes: int) -> bytes:
        from stead.sandbox import ops

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
        executable: bool = False,
    ) -> None:
        from stead.sandbox import ops

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
                executable=executable,
            )
            await client.call(request)
            offset += len(data)

    async def read_stream(
        self, sandbox_id: str, mount: str, path: str, *, max_bytes: int
    ) -> AsyncIterator[bytes]:
        from stead.sandbox import ops

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
        from stead.sandbox import ops

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


def _batches(files: Sequence[MountFile], size: int) -> list[list[MountFile]]:
    """``files`` in order, in batches of at most ``size`` bytes (at least one
    batch: an empty put makes the mount)."""
    batches: list[list[MountFile]] = [[]]
    held = 0
    for file in files:
        if batches[-1] and held + len(file.data) > size:
            batches.append([])
            held = 0
        batches[-1].append(file)
        held += len(file.data)
    return batches


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


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
