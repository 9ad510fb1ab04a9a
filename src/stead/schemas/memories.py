"""Memory stores and memories: request params -> checked values.

The limits are the hosted API's (spec §1.4, §2.9): content at most 102,400
UTF-8 bytes; a path starts with ``/``, has 1 to 20 segments, none empty, ``.``
or ``..``, no control, format or line/paragraph separator characters, is in
NFC and at most 1,024 UTF-8 bytes. Content is never normalised: its hash is the
SHA-256 of exactly the bytes the client sent.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from stead.jsonvalues import Json
from stead.mount_paths import name_problem
from stead.schemas.limits import check_length, check_metadata, patch_metadata
from stead.schemas.validation import RequestError, StrictParams

MEMORY_STORE_CREATE = StrictParams("memory_store_create")
MEMORY_STORE_UPDATE = StrictParams("memory_store_update")
MEMORY_CREATE = StrictParams("memory_create")
MEMORY_UPDATE = StrictParams("memory_update")

MAX_CONTENT_BYTES = 102_400
MAX_PATH_BYTES = 1024
MAX_PATH_SEGMENTS = 20
MAX_NAME_CHARS = 255
MAX_DESCRIPTION_CHARS = 1024
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Control, format, surrogate, line and paragraph separator characters."""


@dataclass(frozen=True, slots=True)
class MemoryUpdate:
    """What a memory update asks for; None leaves that part as it is."""

    content: str | None
    path: str | None
    expected_sha256: str | None


def content_sha256(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def check_name(field: str, name: Any) -> str:
    if not isinstance(name, str):
        raise RequestError(f"{field}: must be a string")
    check_length(field, name, low=1, high=MAX_NAME_CHARS)
    if any(unicodedata.category(c) == "Cc" for c in name):
        raise RequestError(f"{field}: must not contain control characters")
    return name


def check_path(field: str, path: Any) -> str:
    """``path`` if it is a memory path the API accepts, else a 400 naming ``field``."""
    if not isinstance(path, str):
        raise RequestError(f"{field}: must be a string")
    if not path.startswith("/"):
        raise RequestError(f"{field}: must start with '/'")
    if len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise RequestError(f"{field}: must be at most {MAX_PATH_BYTES} bytes")
    if any(unicodedata.category(c) in FORBIDDEN_CATEGORIES for c in path):
        raise RequestError(f"{field}: must not contain control, format or separator characters")
    if unicodedata.normalize("NFC", path) != path:
        raise RequestError(f"{field}: must be in Unicode Normalization Form C")
    segments = path[1:].split("/")
    if len(segments) > MAX_PATH_SEGMENTS:
        raise RequestError(f"{field}: must have at most {MAX_PATH_SEGMENTS} segments")
    for segment in segments:
        if segment in ("", ".", ".."):
            raise RequestError(f"{field}: segments must not be empty, '.' or '..'")
        # A memory is a file in the sessions that mount its store.
        if problem := name_problem(segment):
            raise RequestError(f"{field}: the segment {segment[:80]!r} {problem}")
    return path


def check_prefix(field: str, prefix: str) -> str:
    """A list's ``path_prefix``: ``/`` or a path of whole segments ending in ``/``."""
    if prefix == "/":
        return prefix
    if not prefix.endswith("/"):
        raise RequestError(f"{field}: must end with '/'")
    check_path(field, prefix[:-1])
    return prefix


def check_content(field: str, content: Any) -> str:
    if not isinstance(content, str):
        raise RequestError(f"{field}: must be a string")
    try:
        size = len(content.encode())
    except UnicodeEncodeError:
        raise RequestError(f"{field}: must be valid UTF-8 text") from None
    if size > MAX_CONTENT_BYTES:
        raise RequestError(f"{field}: must be at most {MAX_CONTENT_BYTES} bytes, got {size}")
    return content


def check_sha256(field: str, value: Any) -> str:
    if not isinstance(value, str) or not SHA256_HEX.match(value):
        raise RequestError(f"{field}: must be 64 lowercase hexadecimal characters")
    return value


def parse_store_create(body: Any) -> Json:
    params = MEMORY_STORE_CREATE.validate(body)
    description = params.get("description", "")
    check_length("description", description, high=MAX_DESCRIPTION_CHARS)
    metadata = dict(params.get("metadata", {}))
    check_metadata("metadata", metadata)
    return {
        "name": check_name("name", params["name"]),
        "description": description,
        "metadata": metadata,
    }


def parse_store_update(body: Any) -> Json:
    """The fields to change; ``metadata`` is a patch (``limits.patch_metadata``)."""
    params = MEMORY_STORE_UPDATE.validate(body)
    if params.get("name") is not None:
        check_name("name", params["name"])
    elif "name" in params:
        raise RequestError("name: cannot be cleared")
    if params.get("description") is not None:
        check_length("description", params["description"], high=MAX_DESCRIPTION_CHARS)
    elif "description" in params:
        params["description"] = ""
    return params


def apply_store_update(current_metadata: dict[str, str], params: Json) -> Json:
    """The changed ``name``, ``description`` and ``metadata`` of a store."""
    values: Json = {k: params[k] for k in ("name", "description") if k in params}
    if "metadata" in params:
        values["metadata"] = patch_metadata("metadata", current_metadata, params["metadata"])
    return values


def parse_memory_create(body: Any) -> tuple[str, str]:
    """(path, content) of a new memory."""
    params = MEMORY_CREATE.validate(body)
    return check_path("path", params["path"]), check_content("content", params["content"])


def parse_memory_update(body: Any) -> MemoryUpdate:
    params = MEMORY_UPDATE.validate(body)
    content = params.get("content")
    path = params.get("path")
    expected = None
    if params.get("precondition") is not None:
        precondition = params["precondition"]
        if "content_sha256" not in precondition:
            raise RequestError("precondition.content_sha256: required")
        expected = check_sha256("precondition.content_sha256", precondition["content_sha256"])
    return MemoryUpdate(
        content=None if content is None else check_content("content", content),
        path=None if path is None else check_path("path", path),
        expected_sha256=expected,
    )


MAX_QUERY_CHARS = 2000
MAX_SEARCH_RESULTS = 100
SEARCH_FIELDS = frozenset({"query", "limit", "path_prefix"})


def parse_search(body: Any) -> tuple[str, int, str]:
    """(query, limit, path_prefix) of stead's ``POST /v1/memory_stores/{id}/search``."""
    if not isinstance(body, dict):
        raise RequestError("body: expected an object")
    unknown = sorted(set(body) - SEARCH_FIELDS)
    if unknown:
        raise RequestError(f"{unknown[0]}: unknown field")
    query = body.get("query")
    if not isinstance(query, str) or not query.strip():
        raise RequestError("query: required, a non-empty string")
    check_length("query", query, high=MAX_QUERY_CHARS)
    limit = body.get("limit", 10)
    if (
        isinstance(limit, bool)
        or not isinstance(limit, int)
        or not 1 <= limit <= MAX_SEARCH_RESULTS
    ):
        raise RequestError(f"limit: expected a whole number from 1 to {MAX_SEARCH_RESULTS}")
    prefix = body.get("path_prefix", "/")
    if not isinstance(prefix, str):
        raise RequestError("path_prefix: must be a string")
    return query, limit, check_prefix("path_prefix", prefix)
