"""Input limits of the hosted API (spec §1.4) that the SDK's types do not encode."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from stead.schemas.validation import RequestError

MAX_VERSION = 2**31 - 1
"""Largest agent version number accepted anywhere (ids and filters stay in 32 bits)."""
METADATA_MAX_PAIRS = 16
METADATA_MAX_KEY = 64
METADATA_MAX_VALUE = 512
HOST_NAME = re.compile(
    r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)
"""A host name, or a ``*.`` wildcard over one (an allowlist entry); labels of at
most 63 characters, as DNS and the egress rules (``stead.egress_policy``) take
them: an entry they refuse would fail every tool call of its sessions."""
MAX_URL_CHARS = 2048


def check_length(field: str, value: str | None, *, low: int = 0, high: int) -> None:
    if value is None:
        return
    if len(value) < low:
        raise RequestError(f"{field}: must not be empty" if low == 1 else f"{field}: too short")
    if len(value) > high:
        raise RequestError(f"{field}: must be at most {high} characters, got {len(value)}")


def check_http_url(field: str, value: str) -> str:
    """An http(s) URL with a host and no user info, that stead's HTTP clients
    can parse: what the API accepts must not fail each later use of it."""
    check_length(field, value, low=1, high=MAX_URL_CHARS)
    if any(c <= " " or c == "\x7f" for c in value):
        raise RequestError(f"{field}: must not contain spaces or control characters")
    try:
        parts = urlsplit(value)
        host, port = parts.hostname, parts.port  # each raises on a malformed netloc
    except ValueError as exc:
        raise RequestError(f"{field}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise RequestError(f"{field}: must be an http or https URL with a host")
    if port == 0:
        raise RequestError(f"{field}: port 0 is no port a server listens on")
    if parts.username is not None or parts.password is not None:
        raise RequestError(f"{field}: must not carry a user name or password; use the credential")
    return value


def check_metadata(field: str, metadata: Mapping[str, Any]) -> None:
    if len(metadata) > METADATA_MAX_PAIRS:
        raise RequestError(
            f"{field}: at most {METADATA_MAX_PAIRS} pairs are allowed, got {len(metadata)}",
            code="invalid_metadata",
        )
    for key, value in metadata.items():
        if not key or len(key) > METADATA_MAX_KEY:
            raise RequestError(
                f"{field}: keys must be 1-{METADATA_MAX_KEY} characters, got {key[:80]!r}",
                code="invalid_metadata",
            )
        if isinstance(value, str) and len(value) > METADATA_MAX_VALUE:
            raise RequestError(
                f"{field}.{key}: values must be at most {METADATA_MAX_VALUE} characters",
                code="invalid_metadata",
            )


def patch_metadata(
    field: str,
    current: Mapping[str, str],
    patch: Mapping[str, str | None] | None,
    *,
    empty_deletes: bool = False,
) -> dict[str, str]:
    """Applies a metadata patch: a string upserts, null deletes, a null patch
    clears. ``empty_deletes``: "" deletes too (environments; elsewhere the SDK
    names only null, so "" is a value like any other)."""
    if patch is None:
        return {}
    merged = dict(current)
    for key, value in patch.items():
        if value is None or (empty_deletes and value == ""):
            merged.pop(key, None)
        else:
            merged[key] = value
    check_metadata(field, merged)
    return merged


def check_version(field: str, value: int | None) -> None:
    if value is not None and not 1 <= value <= MAX_VERSION:
        raise RequestError(f"{field}: must be between 1 and {MAX_VERSION}")
