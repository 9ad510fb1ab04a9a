"""The sandbox host's RPC framing and the one place errors cross it.

A connection opens with a ``Hello`` and then carries one call at a time: the
client sends a request frame, the host answers with zero or more ``output``
frames (a streaming exec) or terminal frames and then exactly one ``result``
or ``error`` frame. A frame is a 4-byte big-endian length and a JSON object;
what the objects hold is in ``ops.py``.

Errors travel as the name of their ``SandboxError`` class and its fields, and
``raise_error`` rebuilds the same class on the client, so the brain sees the
sandbox's errors exactly as the in-process backend raises them.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable

import anyio
from anyio.abc import ByteStream
from anyio.streams.buffered import BufferedByteReceiveStream

from stead.jsonvalues import Json
from stead.sandbox import errors

MAX_FRAME = 64 * 1024 * 1024
"""Largest frame either side accepts (a 32 MiB file write, base64-encoded; mount
content crosses in parts of ``ops.MOUNT_PART_BYTES``)."""


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


class FrameStream:
    def __init__(self, stream: ByteStream) -> None:
        self.stream = stream
        self._buffered = BufferedByteReceiveStream(stream)

    async def send(self, frame: Json) -> None:
        data = json.dumps(frame, separators=(",", ":")).encode()
        await self.stream.send(struct.pack(">I", len(data)) + data)

    async def receive(self, *, limit: int = MAX_FRAME) -> Json:
        """The next frame; ``anyio.EndOfStream`` when the peer closed cleanly.
        ``ProtocolError`` as soon as a frame says it is longer than ``limit``,
        before any of it is read."""
        try:
            (length,) = struct.unpack(">I", await self._buffered.receive_exactly(4))
        except anyio.IncompleteRead:
            raise anyio.EndOfStream from None
        if length > limit:
            raise ProtocolError(f"frame of {length} bytes is too large (at most {limit})")
        try:
            data = await self._buffered.receive_exactly(length)
        except anyio.IncompleteRead:
            raise anyio.EndOfStream from None
        try:
            frame = json.loads(data)
        except ValueError:
            raise ProtocolError("frame is not JSON") from None
        if not isinstance(frame, dict):
            raise ProtocolError("frame is not a JSON object")
        return frame

    async def aclose(self) -> None:
        await self.stream.aclose()


# -- errors -------------------------------------------------------------------

_FIELDS: dict[type[errors.SandboxError], tuple[str, ...]] = {
    errors.PathOutsideWorkspace: ("path",),
    errors.FileNotFound: ("path",),
    errors.NotARegularFile: ("path",),
    errors.FileTooLarge: ("path", "size", "limit"),
    errors.RangeTooLarge: ("path", "start", "end", "limit"),
    errors.FileError: ("path", "reason"),
    errors.ExecInDoubt: ("op_key",),
}
_BUILDERS: dict[str, Callable[..., errors.SandboxError]] = {
    cls.__name__: cls
    for cls in (
        errors.SandboxError,
        errors.InvalidArgument,
        errors.PathOutsideWorkspace,
        errors.FileError,
        errors.FileNotFound,
        errors.NotARegularFile,
        errors.FileTooLarge,
        errors.RangeTooLarge,
        errors.ExecInDoubt,
        errors.SandboxUnavailable,
        errors.IsolationUnavailable,
        errors.PackagesUnavailable,
        errors.WorkspaceUnavailable,
        errors.SandboxNotFound,
        errors.SandboxMoved,
        errors.NoSandbox,
        errors.SecretsOutdated,
        errors.VersionMismatch,
    )
}


def error_frame(exc: errors.SandboxError) -> Json:
    kind = type(exc)
    while kind.__name__ not in _BUILDERS:
        kind = kind.__mro__[1]
    fields = _FIELDS.get(kind)
    if fields is not None:
        return {"error": kind.__name__, "fields": {f: getattr(exc, f) for f in fields}}
    return {"error": kind.__name__, "message": str(exc)}


def raise_error(frame: Json) -> None:
    name = str(frame.get("error"))
    builder = _BUILDERS.get(name, errors.SandboxUnavailable)
    fields = frame.get("fields")
    if isinstance(fields, dict):
        try:
            raise builder(**fields)
        except TypeError:
            pass
    raise builder(str(frame.get("message") or name))
