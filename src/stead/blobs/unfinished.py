"""The local backend's uploads that began and never finished, which no listing
shows.

The local backend writes an upload to ``<key>#<n>`` beside its key and renames
it when whole. A process killed mid-upload leaves the part for good: nothing
names it, and ``BlobStore.list`` hides it. ``BlobStore`` finds parts here and
frees them. (S3 keeps a killed upload's parts as a multipart upload, which
obstore cannot list: the bucket's lifecycle rule frees those.)
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from stead.blobs.errors import InvalidBlobKey

UPLOAD_SUFFIX = re.compile(r"#\d+$")
"""What ends a local upload's part: the name it becomes, then ``#`` and digits
(``BlobStore`` refuses keys so named, on every backend)."""


@dataclass(frozen=True, slots=True)
class UnfinishedUpload:
    """An upload to ``key`` that never finished; ``BlobStore.abort_upload`` frees it."""

    key: str
    part: str
    """What it wrote, relative to the store's root: ``<key>#<n>``."""


def local_parts(root: Path, prefix: str) -> list[UnfinishedUpload]:
    """The parts under ``root/prefix`` (every part: ``prefix`` ``""``). Blocking."""
    found: list[UnfinishedUpload] = []
    for directory, _, names in os.walk(root / prefix if prefix else root):
        for name in names:
            suffix = UPLOAD_SUFFIX.search(name)
            if suffix is None or suffix.start() == 0:
                continue
            relative = Path(directory, name).relative_to(root)
            key = (relative.parent / name[: suffix.start()]).as_posix()
            found.append(UnfinishedUpload(key, relative.as_posix()))
    return found


def remove_local_part(root: Path, upload: UnfinishedUpload) -> None:
    """Removes the part; one gone already is no error. Blocking."""
    key, _, number = upload.part.rpartition("#")
    if key != upload.key or not number.isdigit():
        raise InvalidBlobKey(upload.part, f"not a part of an upload to {upload.key!r}")
    with contextlib.suppress(FileNotFoundError):
        (root / upload.part).unlink()


def remove_parts(path: Path) -> None:
    """Removes ``<path>#1``, ``#2`` … up to the first that is missing. The local
    backend writes an upload there and renames it to ``path`` when it is whole,
    taking the lowest number no other upload holds, so a killed upload's part
    is among the first numbers. Blocking."""
    number = 1
    while True:
        try:
            path.with_name(f"{path.name}#{number}").unlink()
        except FileNotFoundError:
            return
        number += 1
