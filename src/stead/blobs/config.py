"""``BlobConfig``: where blobs live. Apart from ``store.py`` so that reading a
configuration (as ``stead serve`` does to check the sandbox host's settings)
does not load obstore."""

from __future__ import annotations

from dataclasses import dataclass


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
    """Longest the store may go without progress: to connect, to answer one
    request, or between two chunks of a stream."""
