"""Reading a JSON request body with a size cap and a clear error for bad JSON."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from stead.api.deps import services
from stead.api.errors import ApiError
from stead.schemas import RequestError


async def json_body(request: Request, *, optional: bool = False) -> Any:
    limit = services(request).settings.max_request_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"request body is larger than {limit} bytes")
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise ApiError(413, f"request body is larger than {limit} bytes")
    if not chunks.strip():
        if optional:
            return {}
        raise RequestError("body: a JSON object is required")
    try:
        parsed = json.loads(chunks, parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RequestError(f"body: not valid JSON ({exc})") from None
    except RecursionError:
        raise RequestError("body: JSON nested too deeply") from None
    try:
        # Stored text must be valid UTF-8: an escaped lone surrogate would be kept
        # and then fail every response that echoes it.
        json.dumps(parsed, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise RequestError("body: a string holds an unpaired UTF-16 surrogate escape") from None
    return parsed


def _reject_constant(name: str) -> Any:
    raise RequestError(f"body: {name} is not a JSON number")
