"""The blobs room: snapshots and large payloads in a local directory or an
S3-compatible bucket (DESIGN §1, §3).

Other rooms import only from here. ``open_blob_store`` picks the backend from
the URL in a ``BlobConfig``; every ``BlobStore`` call is async and bounded in time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stead.blobs.config import BlobConfig, check_blob_url, check_s3_endpoint, check_s3_keys
from stead.blobs.errors import (
    BlobAccessDenied,
    BlobError,
    BlobNotFound,
    BlobUnavailable,
    InvalidBlobKey,
)

if TYPE_CHECKING:
    from stead.blobs.store import PART_BYTES, BlobInfo, BlobStore, open_blob_store
    from stead.blobs.unfinished import UnfinishedUpload

_STORE = ("PART_BYTES", "BlobInfo", "BlobStore", "UnfinishedUpload", "open_blob_store")

__all__ = [
    "PART_BYTES",
    "BlobAccessDenied",
    "BlobConfig",
    "BlobError",
    "BlobInfo",
    "BlobNotFound",
    "BlobStore",
    "BlobUnavailable",
    "InvalidBlobKey",
    "UnfinishedUpload",
    "check_blob_url",
    "check_s3_endpoint",
    "check_s3_keys",
    "open_blob_store",
]


def __getattr__(name: str) -> Any:
    # The store (and obstore, 4 MB) loads on first use: a brain that only reads a
    # ``BlobConfig`` never needs it.
    if name in _STORE:
        from stead.blobs import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
