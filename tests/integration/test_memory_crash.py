"""A memory write killed between its blob and its commit: the server is SIGKILLed
as it commits the version (``store.before_commit``), so the blob is written and
named only by a pending version. After a restart the write is not visible, the
purger removes the blob, and the same write then succeeds once."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import httpx2
import pytest

from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env, make_client

QUICK_PURGE = {
    "STEAD_FILE_PURGE_INTERVAL_SECONDS": "0.1",
    "STEAD_FILE_UPLOAD_GRACE_SECONDS": "0.5",
}
WAIT = 30.0


def memory_blobs(data_dir: Path) -> list[Path]:
    root = data_dir / "blobs" / "memories"
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_a_write_killed_before_its_commit_leaves_nothing_behind(
    tmp_path: Path, fake_model: FakeModel, forker: ServeForker
) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data, env=loop_env(fake_model), forker=forker).start()
    key = first.first_key
    assert key
    with make_client(first.url, key) as client:
        store = client.beta.memory_stores.create(name="crash")
    first.stop()

    # Start-up commits once; the write's first commit begins the version, its
    # second (the third in all) would commit it.
    dying = ServerProcess(
        data, env=loop_env(fake_model, STEAD_FAILPOINTS="store.before_commit:3"), forker=forker
    ).start()
    try:
        with make_client(dying.url, key) as client, pytest.raises(anthropic.APIConnectionError):
            client.beta.memory_stores.memories.create(store.id, path="/m.md", content="lost")
        assert dying.wait_exit(WAIT), dying.log_text()
    finally:
        dying.kill()
    assert len(memory_blobs(data)) == 1  # written, named only by the pending version

    again = ServerProcess(data, env=loop_env(fake_model, **QUICK_PURGE), forker=forker).start()
    try:
        with make_client(again.url, key) as client:
            memories = client.beta.memory_stores.memories
            assert memories.list(store.id).data == []
            assert client.beta.memory_stores.memory_versions.list(store.id).data == []
            deadline = time.monotonic() + WAIT
            while memory_blobs(data) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert memory_blobs(data) == []
            made = memories.create(store.id, path="/m.md", content="kept")
            assert memories.retrieve(made.id, memory_store_id=store.id).content == "kept"
            assert len(memory_blobs(data)) == 1
            assert (
                httpx2.get(f"{again.url}/healthz", timeout=10, verify=client_tls()).status_code
                == 200
            )
    finally:
        again.stop()
