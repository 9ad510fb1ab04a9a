"""``BlobConfig``: where blobs live. Apart from ``store.py`` so that reading a
configuration (as ``stead serve`` does to check the sandbox host's settings)
does not load obstore."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

SCHEMES = ("file", "s3", "memory")
_LOOPBACK_NAMES = frozenset({"localhost", "localhost."})


def check_blob_url(url: str) -> str:
    """``url`` if it names a place blobs can live; ``ValueError`` saying what is
    wrong otherwise (without opening anything)."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(f"blob URL {url!r}: expected a file://, s3:// or memory:// URL")
    if parts.scheme == "file" and (
        parts.netloc not in ("", "localhost") or not parts.path.startswith("/")
    ):
        raise ValueError(f"blob URL {url!r}: expected file:///absolute/dir")
    if parts.scheme == "s3" and not parts.netloc:
        raise ValueError(f"blob URL {url!r}: no bucket")
    return url


def check_s3_endpoint(endpoint: str) -> str:
    """``endpoint`` if an S3 client may use it: ``https://``, or plain
    ``http://`` on a loopback address only (credentials and snapshots would
    otherwise cross the network in the clear); ``ValueError`` otherwise."""
    parts = urlsplit(endpoint)
    if parts.scheme == "http":
        if not _is_loopback(parts.hostname or ""):
            raise ValueError(f"{endpoint!r}: a plain http:// endpoint must be a loopback address")
    elif parts.scheme != "https":
        raise ValueError(f"{endpoint!r}: expected http(s)://")
    return endpoint


def check_s3_keys(access_key_id: str | None, secret_access_key: str | None) -> None:
    """``ValueError`` unless the two are both given or both absent (then
    obstore's credential chain applies). Names neither value."""
    if (access_key_id is None) != (secret_access_key is None):
        raise ValueError("the S3 access key id and secret access key go together")


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class BlobConfig:
    """Where blobs live and how long the store may take to answer.

    ``url`` is ``file:///absolute/dir`` (created if missing), ``s3://bucket`` or
    ``s3://bucket/prefix``, or ``memory://`` (a process-local store for tests).
    For S3, ``s3_endpoint`` names an S3-compatible server (plain ``http://`` only
    on a loopback address); the access key id and secret go together, and when
    both are absent obstore's usual credential chain (``AWS_*`` variables,
    instance metadata) applies.
    """

    url: str
    s3_endpoint: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    timeout_seconds: float = 30.0
    """Longest the store may take to connect, to answer one request, or to
    move one part of a stream: a chunk of a download (``STREAM_CHUNK_BYTES``),
    a part of an upload (``PART_BYTES``, however many parts share the link)."""
