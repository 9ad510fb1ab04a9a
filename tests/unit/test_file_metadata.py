"""A file's metadata as the API shows it (``api/wire.file``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stead.api import wire
from stead.store import FileRecord

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _record(expires_at: datetime | None) -> FileRecord:
    return FileRecord(
        "file_1", "wrkspc_1", "a.txt", "text/plain", 1, "files/file_1", None,
        NOW - timedelta(days=1), expires_at, NOW - timedelta(days=1), None,
    )  # fmt: skip


def test_a_file_is_downloadable_until_it_expires() -> None:
    """After ``expires_at`` a download answers 404 ``file_expired``; the metadata says so."""
    assert wire.file(_record(None), NOW)["downloadable"] is True
    assert wire.file(_record(NOW + timedelta(seconds=1)), NOW)["downloadable"] is True
    assert wire.file(_record(NOW), NOW)["downloadable"] is False
