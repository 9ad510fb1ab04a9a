"""File types told by their first bytes, where a name or a declared type cannot
be trusted: an upload with neither (``api/uploads.py``), and a file the ``read``
tool sends the model as an image or a document (``tools/toolset.py``), which the
Messages API refuses when its bytes are not what its type says."""

from __future__ import annotations

SIGNATURES = (
    (b"%PDF-", "application/pdf"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"PK\x03\x04", "application/zip"),
)


def by_signature(head: bytes) -> str | None:
    """The type whose signature ``head`` starts with; None if none does."""
    for signature, kind in SIGNATURES:
        if head.startswith(signature):
            return kind
    return None
