"""An erase (a deleted session's sandbox) against a save of a stale copy by
another host, in the two orders that matter: the erase's marker is in the blob
store before the erase lists what to delete, and a save whose writes land after
that listing reads the marker and deletes them itself. Two hosts' workspaces
and catalogues on one blob store, in this process."""

from __future__ import annotations

import os
from collections.abc import AsyncIterable
from pathlib import Path

import pytest

from stead.blobs import BlobConfig, BlobInfo, BlobStore, open_blob_store
from stead.sandbox_host.catalogue import Catalogue
from stead.sandbox_host.clock import ManualClock
from stead.sandbox_host.placements import erased_key, sandbox_prefix
from stead.sandbox_host.workspace import SandboxErased, SavedWorkspace, erase_snapshots

pytestmark = pytest.mark.anyio

SANDBOX = "sesn_erased"


def host_copy(root: Path, blobs: BlobStore) -> SavedWorkspace:
    """A host's copy; its workspace in a plain directory (a host's is on the
    sandbox's disk, which this test does not need)."""
    (root / "sandbox").mkdir(parents=True, exist_ok=True)
    return SavedWorkspace(
        SANDBOX,
        os.getuid(),
        root / "sandbox",
        root / "sandbox" / "workspace",
        catalogue=Catalogue.open(root / "catalogue.db"),
        blobs=blobs,
        snapshot_ttl_seconds=3600,
        clock=ManualClock(),
    )


async def stale_copy(root: Path, blobs: BlobStore) -> SavedWorkspace:
    copy = host_copy(root, blobs)
    await copy.prepare()
    (copy.directory / "private").write_bytes(b"a deleted session's file")
    return copy


async def keys(blobs: BlobStore) -> list[str]:
    return sorted(info.key for info in await blobs.list(sandbox_prefix(SANDBOX)))


async def test_the_erase_marks_the_sandbox_before_it_lists_what_to_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = open_blob_store(BlobConfig(url="memory://"))
    listing = blobs.list
    seen: list[bool] = []

    async def list_noting_the_marker(prefix: str = "") -> list[BlobInfo]:
        seen.append(await blobs.head(erased_key(SANDBOX)) is not None)
        return await listing(prefix)

    monkeypatch.setattr(blobs, "list", list_noting_the_marker)
    await erase_snapshots(blobs, Catalogue.open(tmp_path / "catalogue.db"), SANDBOX)
    assert seen == [True]


async def test_a_save_that_lands_after_the_erase_listed_deletes_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stale host read no marker before its upload; the erase then ran
    whole before the stale host wrote its manifest (so the erase deleted the
    snapshot, never saw the manifest): the save's read after its writes finds
    the marker, and nothing it wrote stays."""
    blobs = open_blob_store(BlobConfig(url="memory://"))
    copy = await stale_copy(tmp_path / "stale", blobs)
    other_host = Catalogue.open(tmp_path / "current" / "catalogue.db")
    put_bytes = blobs.put_bytes
    erased_meanwhile: list[str] = []

    async def erase_before_the_manifest(key: str, data: bytes) -> BlobInfo:
        if "/placements/" in key and not erased_meanwhile:
            erased_meanwhile.extend(await keys(blobs))
            await erase_snapshots(blobs, other_host, SANDBOX)
        return await put_bytes(key, data)

    monkeypatch.setattr(blobs, "put_bytes", erase_before_the_manifest)
    with pytest.raises(SandboxErased):
        await copy.checkpoint()
    monkeypatch.undo()
    assert any(key.endswith(".tar.zst") for key in erased_meanwhile)  # the upload was done
    assert await keys(blobs) == [erased_key(SANDBOX)]
    assert await copy.latest() is None  # its own rows went with the blobs


async def test_a_copy_erased_before_its_save_uploads_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blobs = open_blob_store(BlobConfig(url="memory://"))
    copy = await stale_copy(tmp_path / "stale", blobs)
    await erase_snapshots(blobs, Catalogue.open(tmp_path / "current.db"), SANDBOX)
    written: list[str] = []
    put_bytes, put_stream = blobs.put_bytes, blobs.put_stream

    async def noting_bytes(key: str, data: bytes) -> BlobInfo:
        written.append(key)
        return await put_bytes(key, data)

    async def noting_stream(key: str, chunks: AsyncIterable[bytes]) -> BlobInfo:
        written.append(key)
        return await put_stream(key, chunks)

    monkeypatch.setattr(blobs, "put_bytes", noting_bytes)
    monkeypatch.setattr(blobs, "put_stream", noting_stream)
    with pytest.raises(SandboxErased):
        await copy.checkpoint()
    assert written == [erased_key(SANDBOX)]  # the erase's own marker, again: no upload
    assert await keys(blobs) == [erased_key(SANDBOX)]


async def test_an_erase_during_the_upload_is_reported_as_the_erase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The erase deleted the snapshot between its upload and its verification:
    the save says the sandbox was erased, not that its snapshot is corrupt."""
    blobs = open_blob_store(BlobConfig(url="memory://"))
    copy = await stale_copy(tmp_path / "stale", blobs)
    other_host = Catalogue.open(tmp_path / "current.db")
    put_stream = blobs.put_stream

    async def erase_after_the_upload(key: str, chunks: AsyncIterable[bytes]) -> BlobInfo:
        stored = await put_stream(key, chunks)
        await erase_snapshots(blobs, other_host, SANDBOX)
        return stored

    monkeypatch.setattr(blobs, "put_stream", erase_after_the_upload)
    with pytest.raises(SandboxErased):
        await copy.checkpoint()
    assert await keys(blobs) == [erased_key(SANDBOX)]
