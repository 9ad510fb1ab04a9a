"""Reading a request body: JSON content type, a size cap, and ``jsonvalues``' strict rules.

Every route with a body reads it here, so what a body may hold is decided in one
place: UTF-8 JSON without duplicate keys, non-finite or out-of-range numbers,
unpaired surrogates or deep nesting, each refused with a 400 naming the path.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request

from stead.api.deps import services
from stead.api.errors import ApiError
from stead.jsonvalues import JsonValueError, loads
from stead.schemas import RequestError

JSON_TYPES = ("application/json",)
UTF_8 = ("utf-8", "utf8")


async def json_body(request: Request, *, optional: bool = False) -> Any:
    limit = services(request).settings.max_request_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
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
    check_content_type(request.headers.get("content-type"))
    try:
        return loads(bytes(chunks))
    except JsonValueError as exc:
        raise RequestError(str(exc)) from None


def check_content_type(header: str | None) -> None:
    """A body must be declared as JSON (``application/json`` or ``+json``), in UTF-8."""
    if header is None:
        raise ApiError(415, "content-type: send the body as application/json")
    media, _, parameters = header.partition(";")
    media = media.strip().lower()
    suffixed = media.startswith("application/") and media.endswith("+json")
    if media not in JSON_TYPES and not suffixed:
        shown = media or "empty"
        raise ApiError(415, f"content-type: {shown} is not supported; send application/json")
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        charset = value.strip().strip('"').lower()
        if name.strip().lower() == "charset" and charset not in UTF_8:
            raise ApiError(
                415, f"content-type: charset {value.strip()} is not supported; send UTF-8"
            )
