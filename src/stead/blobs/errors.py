"""Blob store errors. ``store.py`` turns obstore's exceptions (and its own
timeouts) into these in one place, ``map_store_errors``; nothing else in the room
raises on purpose.

BlobError                 base; ``retryable`` says whether the same call may succeed later
├── InvalidBlobKey        the key is empty, absolute, or has an empty, ``.`` or ``..``
│                         segment, a segment ending in ``#`` and digits, a backslash
│                         or a control character (a caller bug)
├── BlobNotFound          no object under the key (``key``)
├── BlobAccessDenied      the store refused the credentials or the operation
└── BlobUnavailable       the store did not answer within the timeout, could not be
                          reached, or failed the request (retryable)
"""

from __future__ import annotations

from typing import ClassVar


class BlobError(Exception):
    """Base of every error the blob store raises on purpose."""

    retryable: ClassVar[bool] = False


class InvalidBlobKey(BlobError):
    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(f"invalid blob key {key!r}: {reason}")


class BlobNotFound(BlobError):
    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"no blob under {key!r}")


class BlobAccessDenied(BlobError):
    pass


class BlobUnavailable(BlobError):
    retryable: ClassVar[bool] = True
