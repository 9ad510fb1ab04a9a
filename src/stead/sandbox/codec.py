"""The host protocol's messages to and from JSON: a frame parsed into the
request it holds (``InvalidArgument`` naming the first bad field), a reply into
its op's reply type, a terminal frame into one of its kinds, and any of them
back into JSON-ready data. The types are in ``ops.py``.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError

from stead.jsonvalues import Json
from stead.sandbox.errors import InvalidArgument
from stead.sandbox.ops import (
    AnyRequest,
    Output,
    Request,
    TerminalControlFrame,
    TerminalData,
    TerminalDetach,
    TerminalExit,
    TerminalInput,
    TerminalOutputFrame,
    TerminalReplayed,
    TerminalResize,
)

T = TypeVar("T")


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    """``kind``'s adapter, built at its first use (the messages' models defer
    theirs too): a brain parses no request and uses few of the replies, and
    building every one at import took tens of milliseconds of each start."""
    return TypeAdapter(kind)


def parse_terminal_output(frame: Json) -> TerminalData | TerminalReplayed | TerminalExit:
    """A host's terminal frame; ``ValueError`` if it is none."""
    frames: TypeAdapter[TerminalOutputFrame] = _adapter(TerminalOutputFrame)
    return _parsed(frames, frame)


def parse_terminal_control(frame: Json) -> TerminalInput | TerminalResize | TerminalDetach:
    """A brain's terminal frame; ``ValueError`` if it is none."""
    frames: TypeAdapter[TerminalControlFrame] = _adapter(TerminalControlFrame)
    return _parsed(frames, frame)


def _parsed(adapter: TypeAdapter[T], frame: Json) -> T:
    try:
        return adapter.validate_python(frame, strict=False)
    except ValidationError:
        raise ValueError("malformed terminal frame") from None


def request_types() -> tuple[type[Request], ...]:
    """Every request type, for the host's dispatch table and its test."""
    found: list[type[Request]] = []
    pending: list[type[Request]] = [Request]
    while pending:
        for kind in pending.pop().__subclasses__():
            pending.append(kind)
            if "op" in kind.model_fields:
                found.append(kind)
    return tuple(found)


def parse_request(frame: Json) -> AnyRequest:
    """The request a frame holds; ``InvalidArgument`` naming the first bad field."""
    try:
        request: AnyRequest = _adapter(AnyRequest).validate_python(frame, strict=False)
        return request
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            raise InvalidArgument(f"op: unknown operation {frame.get('op')!r}") from None
        # The first part of the location is the op the frame named.
        where = ".".join(str(part) for part in first["loc"][1:]) or "request"
        raise InvalidArgument(f"{where}: {first['msg']}") from None


def decode_output(value: Any) -> bytes:
    """The bytes of a streaming exec's ``Output`` frame."""
    try:
        return Output.model_validate(value, strict=False).output
    except ValidationError:
        raise ValueError("malformed output frame") from None


def encode(message: Any) -> Any:
    """A request or a reply (a ``Message``, a record, ``Json``) as JSON-ready data."""
    if isinstance(message, BaseModel):
        return message.model_dump(mode="json")
    if dataclasses.is_dataclass(message) and not isinstance(message, type):
        return dataclasses.asdict(message)
    return message


def decode_reply(request: Request, value: Any) -> Any:
    """The reply to ``request`` from JSON data; ``ValueError`` if it is not one."""
    try:
        return _adapter(type(request).reply).validate_python(value, strict=False)
    except ValidationError as exc:
        raise ValueError(f"malformed reply to {type(request).__name__}: {exc}") from None
