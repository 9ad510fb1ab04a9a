"""A sandbox host killed mid-snapshot (SIGKILL at the failpoint
``snapshot.mid_upload``, once the upload in parts has begun), with a real
bubblewrap sandbox, on the local blob store. What the upload wrote stays there
(``<key>#1``), named by nothing and shown by no listing: the host's next start
frees it, and so does an erase through any host. (On S3 such an upload is left
to the bucket's lifecycle rule: obstore cannot list multipart uploads.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from stead.blobs import BlobConfig, open_blob_store
from stead.sandbox import HostSandbox, SandboxError
from stead.testing import HostProcess, ServeForker
from tests.sandbox.conftest import client_of, config, new_id, requires_isolation

pytestmark = [pytest.mark.anyio, requires_isolation]

KILLED = {"STEAD_FAILPOINTS": "snapshot.mid_upload:1"}
NOISE = "head -c 24M /dev/urandom > noise"
"""Three upload parts' worth of a workspace that does not compress."""


def parts_under(root: Path) -> list[Path]:
    """What the local store holds of uploads that never finished, read from disk."""
    return sorted(root.rglob("*#*"))


async def killed_mid_snapshot(process: HostProcess, sandbox_id: str) -> None:
    """Fills the sandbox's workspace, then asks for the snapshot that kills its host."""
    client = client_of(process)
    try:
        sandbox = HostSandbox(client, sandbox_id, config())
        made = await sandbox.exec(NOISE, op_key=f"noise-{sandbox_id}", timeout=60)
        assert made.exit_code == 0, made
        with pytest.raises(SandboxError):
            await sandbox.snapshot()
    finally:
        await client.aclose()
    process.kill()


async def test_a_restarted_host_frees_what_its_killed_snapshot_upload_left(
    tmp_path: Path, forker: ServeForker
) -> None:
    root = tmp_path / "blobs"
    url = f"file://{root}"
    blobs = open_blob_store(BlobConfig(url=url))
    killed = HostProcess(tmp_path / "state", blob_url=url, env=KILLED, forker=forker)
    sandbox_id = new_id()
    prefix = f"sandboxes/{sandbox_id}"
    restarted = None
    try:
        await killed_mid_snapshot(killed.start(), sandbox_id)
        [left] = await blobs.unfinished_uploads(prefix)
        assert left.key.startswith(f"{prefix}/snap_") and left.key.endswith(".tar.zst")
        assert parts_under(root) == [root / f"{left.key}#1"]
        assert not [info for info in await blobs.list(prefix) if "snap_" in info.key]
        # An upload of another host's sandbox, under way for all this host knows.
        await killed_mid_snapshot(
            HostProcess(tmp_path / "other", blob_url=url, env=KILLED, forker=forker).start(),
            other := new_id(),
        )
        restarted = HostProcess(
            tmp_path / "state", blob_url=url, work_dir=killed.work_dir, forker=forker
        ).start()
        [kept] = parts_under(root)
        assert kept.is_relative_to(root / f"sandboxes/{other}")
        # The sandbox and its workspace are as they were: the next snapshot holds it.
        client = client_of(restarted)
        try:
            sandbox = HostSandbox(client, sandbox_id, config())
            assert await sandbox.snapshot() is not None
            listed = await sandbox.exec("wc -c < noise", op_key="count", timeout=60)
            assert listed.output.strip() == str(24 * 1024**2)
            await client.destroy(sandbox_id, erase=True)
            await client.destroy(other, erase=True)
        finally:
            await client.aclose()
        assert parts_under(root) == []
    finally:
        killed.stop()
        if restarted is not None:
            restarted.stop()


async def test_an_erase_frees_what_a_killed_snapshot_upload_left(
    tmp_path: Path, forker: ServeForker
) -> None:
    """Erased through another host, which never held the sandbox: the
    erase deleted what the listing showed, and the upload's leavings stayed."""
    root = tmp_path / "blobs"
    url = f"file://{root}"
    blobs = open_blob_store(BlobConfig(url=url))
    killed = HostProcess(tmp_path / "state", blob_url=url, env=KILLED, forker=forker)
    other = HostProcess(tmp_path / "other", blob_url=url, forker=forker)
    sandbox_id = new_id()
    try:
        await killed_mid_snapshot(killed.start(), sandbox_id)
        [left] = parts_under(root)
        assert left.is_relative_to(root / f"sandboxes/{sandbox_id}")
        client = client_of(other.start())
        try:
            assert await client.destroy(sandbox_id, erase=True) is None
        finally:
            await client.aclose()
        assert parts_under(root) == []
        assert [info.key for info in await blobs.list()] == [f"sandboxes/{sandbox_id}/erased"]
    finally:
        killed.stop()
        other.stop()
