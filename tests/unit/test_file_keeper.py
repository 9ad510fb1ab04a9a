"""``FileKeeper`` on each store and each blob backend (a local directory, and S3
on the SeaweedFS server on loopback): bytes round trip, a delete removes them,
expired files lose their bytes but keep their metadata, and the workspace's
storage quota refuses what does not fit, also when uploads race."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import anyio
import pytest

from stead.blobs import BlobConfig
from stead.runtime import FileExpired, FileKeeper
from stead.store import NotFound, SqlStore, StorageQuotaExceeded
from stead.testing.seaweed import S3Server
from tests.conftest import s3_config
from tests.databases import BACKENDS
from tests.unit.conftest import ManualClock

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("database_url", BACKENDS, indirect=True)]

HOUR = timedelta(hours=1)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["file", "s3"])
def blob_config(request: pytest.FixtureRequest, tmp_path: Path) -> BlobConfig:
    if request.param == "file":
        return BlobConfig(url=f"file://{tmp_path / 'blobs'}")
    server: S3Server = request.getfixturevalue("s3_server")
    return s3_config(server, server.url(f"files-{uuid.uuid4().hex}"))


def keeper_of(store: SqlStore, blobs: BlobConfig, clock: ManualClock, quota: int = 0) -> FileKeeper:
    return FileKeeper(
        store, blobs, purge_interval=60, upload_grace=3600, quota_bytes=quota, clock=clock
    )


@pytest.fixture
def files(store: SqlStore, blob_config: BlobConfig, clock: ManualClock) -> FileKeeper:
    return keeper_of(store, blob_config, clock)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def _keys(files: FileKeeper) -> set[str]:
    return {found.key for found in await files.blob_store().list("files")}


async def _upload(
    files: FileKeeper, workspace: str, data: bytes, expires_at: datetime | None = None
) -> str:
    record = await files.upload(
        workspace,
        "f.bin",
        "application/octet-stream",
        len(data),
        _once(data),
        expires_at=expires_at,
    )
    return record.id


async def _read(files: FileKeeper, workspace: str, file_id: str) -> bytes:
    _, chunks = await files.content(workspace, file_id)
    return b"".join([chunk async for chunk in chunks])


async def test_bytes_round_trip_and_a_delete_removes_them(
    store: SqlStore, files: FileKeeper
) -> None:
    workspace = (await store.create_workspace("w")).id
    file_id = await _upload(files, workspace, b"hello bytes")
    assert await _read(files, workspace, file_id) == b"hello bytes"
    assert await _keys(files) == {f"files/{workspace}/{file_id}"}
    await files.delete(workspace, file_id)
    assert await _keys(files) == set()
    with pytest.raises(NotFound):
        await store.get_file(workspace, file_id)


async def test_an_expired_file_loses_its_bytes_and_keeps_its_metadata(
    store: SqlStore, files: FileKeeper, blob_config: BlobConfig, clock: ManualClock
) -> None:
    workspace = (await store.create_workspace("w")).id
    expiring = await _upload(files, workspace, b"short-lived", clock.now() + HOUR)
    kept = await _upload(files, workspace, b"kept", clock.now() + 3 * HOUR)
    assert await files.purge() == 0  # nothing expired yet
    clock.at += 2 * HOUR
    with pytest.raises(FileExpired):
        await _read(files, workspace, expiring)
    # Two purgers (two processes on one database) take the same file at once:
    # the blob goes, the row is marked once, neither fails.
    other = keeper_of(store, blob_config, clock)
    async with anyio.create_task_group() as group:
        group.start_soon(files.purge)
        group.start_soon(other.purge)
    assert await _keys(files) == {f"files/{workspace}/{kept}"}
    record = await store.get_file(workspace, expiring)  # metadata is still shown
    assert record.bytes_removed_at is not None and record.size_bytes == len(b"short-lived")
    with pytest.raises(FileExpired):
        await _read(files, workspace, expiring)
    assert await files.purge() == 0  # marked: not taken again
    await files.delete(workspace, expiring)  # its missing blob is no obstacle
    with pytest.raises(NotFound):
        await store.get_file(workspace, expiring)
    assert await _read(files, workspace, kept) == b"kept"


async def test_a_sweep_cut_after_the_blob_finishes_on_the_next_round(
    store: SqlStore, files: FileKeeper, clock: ManualClock
) -> None:
    workspace = (await store.create_workspace("w")).id
    file_id = await _upload(files, workspace, b"x" * 10, clock.now() + HOUR)
    clock.at += 2 * HOUR
    record = await store.get_file(workspace, file_id)
    await files.blob_store().delete(record.blob_key)  # as a purger that died before the mark
    assert await files.purge() == 1
    assert (await store.get_file(workspace, file_id)).bytes_removed_at is not None


async def test_an_upload_past_the_quota_is_refused_and_stores_nothing(
    store: SqlStore, blob_config: BlobConfig, clock: ManualClock
) -> None:
    files = keeper_of(store, blob_config, clock, quota=100)
    workspace = (await store.create_workspace("w")).id
    other = (await store.create_workspace("o")).id
    first = await _upload(files, workspace, b"a" * 60, clock.now() + HOUR)
    with pytest.raises(StorageQuotaExceeded, match="quota of 100 bytes") as refused:
        await _upload(files, workspace, b"b" * 41)
    assert (refused.value.used, refused.value.size) == (60, 41)
    assert await _keys(files) == {f"files/{workspace}/{first}"}
    assert [f.id for f in (await store.files_by_ids(workspace, [first]))] == [first]
    await _upload(files, workspace, b"b" * 40)  # exactly at the quota
    await _upload(files, other, b"c" * 100)  # each workspace has its own
    clock.at += 2 * HOUR
    await files.purge()  # an expired file whose bytes are gone no longer counts
    await _upload(files, workspace, b"d" * 60)
    # The workspace's own limit wins over the server's quota, 0 refusing all.
    await store.set_limits(workspace, "", {"file_storage_bytes": 0})
    with pytest.raises(StorageQuotaExceeded, match="quota of 0 bytes"):
        await _upload(files, workspace, b"e")
    await store.set_limits(workspace, "", {"file_storage_bytes": None})
    unlimited = keeper_of(store, blob_config, clock)
    await _upload(unlimited, workspace, b"f" * 1000)


async def test_uploads_side_by_side_never_pass_the_quota(
    store: SqlStore, blob_config: BlobConfig, clock: ManualClock
) -> None:
    files = keeper_of(store, blob_config, clock, quota=500)
    workspace = (await store.create_workspace("w")).id
    outcomes: list[str] = []

    async def one() -> None:
        try:
            outcomes.append(await _upload(files, workspace, b"z" * 100))
        except StorageQuotaExceeded:
            outcomes.append("refused")

    async with anyio.create_task_group() as group:
        for _ in range(8):
            group.start_soon(one)
    stored = [o for o in outcomes if o != "refused"]
    assert len(stored) == 5 and outcomes.count("refused") == 3
    assert len(await _keys(files)) == 5
