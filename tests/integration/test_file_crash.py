"""SIGKILL of ``stead serve`` while an upload's bytes are written to the blob
store: after a restart the file is not listed, and the purger removes every
byte of it, the part the local blob store had staged included."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anthropic
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess
from tests.conftest import loop_env, make_client

WAIT = 30.0
CHUNK = 1024 * 1024
"""What the upload hands the blob store at a time (``uploads.CHUNK_BYTES``)."""


def _blobs(data: Path) -> set[Path]:
    root = data / "blobs" / "files"
    return {p for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_an_upload_killed_mid_write_leaves_nothing_behind(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    data = tmp_path / "data"
    # Ten chunks are past the blob store's first 8 MiB part: the upload is staged.
    doomed_env = loop_env(
        fake_model,
        STEAD_FAILPOINTS="files.blob_chunk:10",
        STEAD_MAX_FILE_BYTES=str(32 * CHUNK),
    )
    doomed = ServerProcess(data, env=doomed_env, forker=forker).start()
    key = doomed.first_key
    assert key
    try:
        with make_client(doomed.url, key) as client, pytest.raises(anthropic.APIConnectionError):
            client.beta.files.upload(file=("big.bin", os.urandom(20 * CHUNK)))
        assert _blobs(data), "part of the upload was written before the kill"
    finally:
        doomed.kill()

    fast_purge = {
        "STEAD_FILE_UPLOAD_GRACE_SECONDS": "0.5",
        "STEAD_FILE_PURGE_INTERVAL_SECONDS": "0.2",
    }
    survivor = ServerProcess(data, env=loop_env(fake_model, **fast_purge), forker=forker).start()
    try:
        with make_client(survivor.url, key) as client:
            assert list(client.beta.files.list()) == []
            deadline = time.monotonic() + WAIT
            while _blobs(data) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _blobs(data) == set(), "the purger removes what the killed upload wrote"
            uploaded = client.beta.files.upload(file=("small.txt", b"after"))
            assert client.beta.files.download(uploaded.id).read() == b"after"
    finally:
        survivor.stop()
