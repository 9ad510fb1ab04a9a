"""The blobs room: snapshots and large payloads in a local directory or an
S3-compatible bucket (DESIGN §1, §3).

Other rooms import only from here. ``open_blob_store`` picks the backend from
the URL in a ``BlobConfig``; every ``BlobStore`` call is async and bounded in time.
"""

from __future__ import annotations

from stead.blobs.errors import (
    BlobAccessDenied,
    BlobError,
    BlobNotFound,
    BlobUnavailable,
    InvalidBlobKey,
)
from stead.blobs.store import BlobConfig, BlobInfo, BlobStore, open_blob_store

__all__ = [
    "BlobAccessDenied",
    "BlobConfig",
    "BlobError",
    "BlobInfo",
    "BlobNotFound",
    "BlobStore",
    "BlobUnavailable",
    "InvalidBlobKey",
    "open_blob_store",
]
