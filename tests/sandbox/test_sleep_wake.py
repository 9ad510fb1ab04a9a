"""Sleep and wake (rule 6): the workspace goes to the blob store as a verified
snapshot and comes back byte for byte; a snapshot that cannot be restored is
an error, never an empty workspace. Against a local blob directory and a real
S3-compatible server."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from stead.blobs import BlobConfig, open_blob_store
from stead.sandbox import (
    FileNotFound,
    HostClient,
    HostSandbox,
    SandboxNotFound,
    WorkspaceUnavailable,
)
from stead.sandbox_host.commands import NEW_SHELL
from stead.sandbox_host.manager import SandboxManager
from stead.sandbox_host.placements import erased_key
from stead.testing import HostProcess, ServeForker
from stead.testing.seaweed import S3Server, seaweed_s3
from tests.sandbox.conftest import (
    WAIT,
    client_of,
    config,
    host_on_a_manual_clock,
    new_id,
    requires_isolation,
    workspace_on_host,
)

pytestmark = [pytest.mark.anyio, requires_isolation]

MAKE_TREE = """
set -e
mkdir -p tree/a/b tree/empty
printf 'hello\\n' > tree/hello.txt
ln -s hello.txt tree/link
chmod 750 tree/a
for i in $(seq 1 50); do head -c 1000000 /dev/urandom > tree/a/b/blob$i; done
echo '#!/bin/sh' > tree/run.sh && chmod +x tree/run.sh
"""
DIGEST = (
    "cd tree && find . -printf '%y %m %p %l\\n' | sort && find . -type f | sort | xargs sha256sum"
)


async def tree_digest(sandbox: HostSandbox) -> str:
    result = await sandbox.exec(DIGEST, op_key=new_id(), timeout=60)
    assert result.exit_code == 0, result.output
    # The first command after a sleep is told its shell is new: the files are what count.
    return hashlib.sha256(result.output.removeprefix(NEW_SHELL).encode()).hexdigest()


async def sleep_and_wake_round_trip(sandbox: HostSandbox, host: HostProcess) -> None:
    made = await sandbox.exec(MAKE_TREE, op_key=new_id(), timeout=120)
    assert made.exit_code == 0, made.output
    before = await tree_digest(sandbox)
    assert await sandbox.sleep()
    status = await sandbox.status()
    assert status["state"] == "cold"
    assert not workspace_on_host(host, sandbox.sandbox_id).exists()
    after = await tree_digest(sandbox)  # wakes it
    assert after == before
    assert (await sandbox.status())["state"] == "active"


async def test_sleep_and_wake_keep_the_workspace_in_a_local_blob_dir(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    await sleep_and_wake_round_trip(sandbox, host)
    blobs = Path(host.blob_url.removeprefix("file://")) / "sandboxes" / sandbox.sandbox_id
    (snapshot,) = [p.name for p in blobs.iterdir() if p.is_file()]
    assert snapshot.endswith(".tar.zst")
    # Named as the sandbox's latest in a manifest (an unplaced caller: placement 0).
    (manifest,) = (blobs / "placements").iterdir()
    assert manifest.name == f"{0:020d}.json"
    assert json.loads(manifest.read_bytes())["blob_key"].endswith(snapshot)


async def test_a_sparse_file_comes_back_sparse(sandbox: HostSandbox, host: HostProcess) -> None:
    """A file of holes (a disk image, a database file) takes no more disk after a
    wake than before: its snapshot holds the holes as zeros, which once came back
    written out, so a terabyte of holes filled the host's disk at the wake."""
    made = await sandbox.exec(
        "truncate -s 1G sparse && printf mid | dd of=sparse bs=1 seek=70000 conv=notrunc"
        " 2>/dev/null && printf end >> sparse",
        op_key=new_id(),
        timeout=60,
    )
    assert made.exit_code == 0, made.output
    assert await sandbox.sleep()
    shown = (
        "stat -c '%s %b %B' sparse; dd if=sparse bs=1 skip=70000 count=3 2>/dev/null;"
        " tail -c 3 sparse"
    )
    woke = await sandbox.exec(shown, op_key=new_id(), timeout=60)
    size, blocks, block_size, data = woke.output.removeprefix(NEW_SHELL).split(maxsplit=3)
    assert int(size) == 1024**3 + 3
    assert int(blocks) * int(block_size) < 1024**2, woke.output
    assert data == "midend"


async def test_a_command_after_a_sleep_is_told_its_shell_is_new(sandbox: HostSandbox) -> None:
    """The files come back; the shell's working directory and variables cannot,
    and the first command after says so (once; a first command ever is not told)."""
    first = await sandbox.exec(
        "mkdir -p sub && cd sub && export KEEP=1", op_key=new_id(), timeout=30
    )
    assert first.output == ""
    assert (await sandbox.exec("pwd", op_key=new_id(), timeout=30)).output == "/workspace/sub\n"
    assert await sandbox.sleep()
    woke = await sandbox.exec('pwd; echo "[$KEEP]"', op_key=new_id(), timeout=30)
    assert woke.output.startswith("[stead: this command ran in a new shell")
    assert woke.output.endswith("/workspace\n[]\n")
    assert (await sandbox.exec("pwd", op_key=new_id(), timeout=30)).output == "/workspace\n"


async def test_a_second_sleep_replaces_the_older_snapshot_only_once_verified(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    await sandbox.write_file("one", b"1")
    assert await sandbox.sleep()
    await sandbox.write_file("two", b"2")
    assert await sandbox.sleep()
    blobs = Path(host.blob_url.removeprefix("file://")) / "sandboxes" / sandbox.sandbox_id
    assert len([p for p in blobs.iterdir() if p.is_file()]) == 1
    assert await sandbox.read_file("one", max_bytes=10) == b"1"
    assert await sandbox.read_file("two", max_bytes=10) == b"2"


async def test_an_erased_sandbox_leaves_no_snapshot_and_comes_back_empty(
    sandbox: HostSandbox, client: HostClient, host: HostProcess
) -> None:
    """A deleted session's: not saved again, and what sleep saved is deleted,
    manifests included; a sandbox of a prefix-sharing id keeps its own."""
    neighbour = HostSandbox(client, f"{sandbox.sandbox_id}x", config())
    for each in (sandbox, neighbour):
        await each.write_file("private", b"secret")
        assert await each.sleep()
    await sandbox.write_file("later", b"unsaved")
    blobs = Path(host.blob_url.removeprefix("file://")) / "sandboxes"
    assert (blobs / sandbox.sandbox_id / "placements").is_dir()
    try:
        assert await client.destroy(sandbox.sandbox_id, erase=True) is not None
        erased = [p for p in (blobs / sandbox.sandbox_id).rglob("*") if p.is_file()]
        assert [p.name for p in erased] == ["erased"]  # the marker only, empty
        assert erased[0].stat().st_size == 0
        assert not workspace_on_host(host, sandbox.sandbox_id).exists()
        with pytest.raises(FileNotFound):  # made again: empty, not restored
            await sandbox.read_file("private", max_bytes=10)
        assert await client.destroy(sandbox.sandbox_id, erase=True) is not None
        assert await client.destroy(sandbox.sandbox_id, erase=True) is None  # gone: done
        assert await neighbour.read_file("private", max_bytes=10) == b"secret"
    finally:
        await client.destroy(neighbour.sandbox_id, erase=True)


async def test_a_corrupt_snapshot_is_an_error_not_an_empty_workspace(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    await sandbox.write_file("precious", b"data")
    assert await sandbox.sleep()
    blobs = Path(host.blob_url.removeprefix("file://")) / "sandboxes" / sandbox.sandbox_id
    (snapshot,) = [p for p in blobs.iterdir() if p.is_file()]
    snapshot.write_bytes(b"not a snapshot")
    for _ in range(2):
        with pytest.raises(WorkspaceUnavailable):
            await sandbox.exec("ls", op_key=new_id(), timeout=10)
    assert not workspace_on_host(host, sandbox.sandbox_id).exists()
    assert "corrupt" in (await sandbox.status())["last_error"]


# uvloop, as `stead sandbox-host` runs: anyio's asyncio Unix sockets race a
# cancelled read against readiness (see stead/sandbox/unix.py).
@pytest.mark.parametrize("anyio_backend", [("asyncio", {"use_uvloop": True})])
async def test_an_idle_sandbox_sleeps_by_the_hosts_clock_unless_a_process_runs(
    tmp_path: Path,
) -> None:
    async with host_on_a_manual_clock(tmp_path) as (manager, clock, client, options):
        sandbox = HostSandbox(client, new_id(), config(sleep_after=300))
        started = await sandbox.start_process("sleep 600")
        await sandbox.write_file("kept", b"yes")
        clock.advance(3600)
        await manager.sleep_idle_once()
        assert (await sandbox.status())["state"] == "active"  # the process runs

        await sandbox.kill_process(started["id"])
        with anyio.fail_after(WAIT):
            while any(p["running"] for p in await sandbox.list_processes()):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        await sandbox.acquire()  # activity now
        clock.advance(299)
        await manager.sleep_idle_once()
        assert (await sandbox.status())["state"] == "active"
        clock.advance(2)
        await manager.sleep_idle_once()
        assert (await sandbox.status())["state"] == "cold"
        assert not (
            options.work_dir / "sandboxes" / sandbox.sandbox_id / "disk" / "workspace"
        ).exists()
        assert await sandbox.read_file("kept", max_bytes=10) == b"yes"
        await client.destroy(sandbox.sandbox_id)


@pytest.mark.parametrize("anyio_backend", [("asyncio", {"use_uvloop": True})])
async def test_a_background_process_that_just_ended_keeps_its_output_for_sleep_after(
    tmp_path: Path,
) -> None:
    """A process running is activity until it ends: one that ran longer than
    ``sleep_after`` once put its sandbox to sleep at the next idle check after
    its exit, and its exit code and output went with the body."""
    async with host_on_a_manual_clock(tmp_path) as (manager, clock, client, _):
        sandbox = HostSandbox(client, new_id(), config(sleep_after=300))
        await sandbox.write_file("go", b"")
        started = await sandbox.start_process("while [ -e go ]; do sleep 0.05; done; echo done")
        clock.advance(3600)
        await manager.sleep_idle_once()
        assert (await sandbox.status())["state"] == "active"  # the process runs
        # Ends on its own, after the last call: nothing else was active since.
        os.unlink(workspace_in(manager, sandbox) / "go")
        with anyio.fail_after(WAIT):
            while any(p["running"] for p in await sandbox.list_processes()):  # noqa: ASYNC110
                await anyio.sleep(0.05)
        clock.advance(299)
        await manager.sleep_idle_once()
        assert (await sandbox.status())["state"] == "active"
        output, _ = await sandbox.read_process(started["id"])
        assert output == b"done\n"
        clock.advance(2)
        await manager.sleep_idle_once()
        assert (await sandbox.status())["state"] == "cold"
        await client.destroy(sandbox.sandbox_id)


def workspace_in(manager: SandboxManager, sandbox: HostSandbox) -> Path:
    return manager.options.work_dir / "sandboxes" / sandbox.sandbox_id / "disk" / "workspace"


@pytest.mark.parametrize("anyio_backend", [("asyncio", {"use_uvloop": True})])
async def test_the_idle_sleeper_drops_a_copy_erased_through_another_host(
    tmp_path: Path,
) -> None:
    """The sandbox was erased through another host (its session deleted) while
    this one still held a copy: the copy's idle sleep saves nothing that stays."""
    async with host_on_a_manual_clock(tmp_path) as (manager, clock, client, options):
        sandbox = HostSandbox(client, new_id(), config(sleep_after=300))
        await sandbox.write_file("private", b"stale copy")
        held = await manager.get(sandbox.sandbox_id)  # as a call in flight holds it
        # What another host's erase leaves, once it has deleted every blob.
        await open_blob_store(options.blobs).put_bytes(erased_key(sandbox.sandbox_id), b"")
        clock.advance(301)
        await manager.sleep_idle_once()
        assert await client.sandbox_status(sandbox.sandbox_id) is None
        blobs = tmp_path / "blobs" / "sandboxes" / sandbox.sandbox_id
        assert [p.name for p in blobs.rglob("*") if p.is_file()] == ["erased"]
        assert not (options.work_dir / "sandboxes" / sandbox.sandbox_id).exists()
        with pytest.raises(SandboxNotFound):  # no body starts for the destroyed copy
            await held.ensure_active()
        assert not (options.work_dir / "sandboxes" / sandbox.sandbox_id).exists()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with seaweed_s3() as server:
        yield server


def s3_env(s3: S3Server) -> dict[str, str]:
    return {
        "STEAD_S3_ENDPOINT": s3.endpoint,
        "STEAD_S3_REGION": s3.region,
        "STEAD_S3_ACCESS_KEY_ID": s3.access_key_id,
        "STEAD_S3_SECRET_ACCESS_KEY": s3.secret_access_key,
    }


async def test_sleep_and_wake_against_an_s3_compatible_server(
    s3: S3Server, tmp_path: Path, forker: ServeForker
) -> None:
    process = HostProcess(
        tmp_path / "state",
        blob_url=s3.url("snapshots"),
        env=s3_env(s3),
        forker=forker,
    ).start()
    client = client_of(process)
    sandbox = HostSandbox(client, new_id(), config())
    try:
        await sleep_and_wake_round_trip(sandbox, process)
        assert await process_blobs(s3, sandbox.sandbox_id)
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
        process.stop()


async def process_blobs(s3: S3Server, sandbox_id: str) -> list[str]:
    config = BlobConfig(
        url=s3.url("snapshots"),
        s3_endpoint=s3.endpoint,
        s3_region=s3.region,
        s3_access_key_id=s3.access_key_id,
        s3_secret_access_key=s3.secret_access_key,
    )
    store = open_blob_store(config)
    return [info.key for info in await store.list(f"sandboxes/{sandbox_id}")]


@asynccontextmanager
async def slept_on_own_host(
    tmp_path: Path, forker: ServeForker, ttl: str, gc_interval: str
) -> AsyncIterator[tuple[HostSandbox, Path]]:
    """A sandbox put to sleep on a host of its own whose snapshots live ``ttl``
    seconds and are collected every ``gc_interval``; and its blob directory."""
    process = HostProcess(
        tmp_path / "state",
        env={
            "STEAD_SNAPSHOT_TTL_SECONDS": ttl,
            "STEAD_SNAPSHOT_GC_INTERVAL_SECONDS": gc_interval,
        },
        forker=forker,
    ).start()
    client = client_of(process)
    sandbox = HostSandbox(client, new_id(), config())
    try:
        await sandbox.write_file("old", b"data")
        assert await sandbox.sleep()
        yield (
            sandbox,
            Path(process.blob_url.removeprefix("file://")) / "sandboxes" / sandbox.sandbox_id,
        )
    finally:
        await client.destroy(sandbox.sandbox_id)
        await client.aclose()
        process.stop()


async def test_expired_snapshots_are_deleted_and_never_replaced_by_nothing(
    tmp_path: Path, forker: ServeForker
) -> None:
    own_host = slept_on_own_host(tmp_path, forker, ttl="0.5", gc_interval="0.2")
    async with own_host as (sandbox, blobs):
        with anyio.fail_after(WAIT):
            # The host deletes the snapshot; its manifest stays, naming what expired.
            while any(p.is_file() for p in blobs.iterdir()):  # noqa: ASYNC110
                await anyio.sleep(0.1)
        with pytest.raises(WorkspaceUnavailable, match="expired"):
            await sandbox.read_file("old", max_bytes=10)


async def test_a_snapshot_past_its_expiry_is_expired_before_the_collector_deletes_it(
    tmp_path: Path, forker: ServeForker
) -> None:
    # The collector deletes the blob, then marks the row: a wake in between
    # once found the row and no blob ("missing from the blob store").
    own_host = slept_on_own_host(tmp_path, forker, ttl="0.3", gc_interval="3600")
    async with own_host as (sandbox, blobs):
        await anyio.sleep(0.5)
        with pytest.raises(WorkspaceUnavailable, match="expired"):
            await sandbox.read_file("old", max_bytes=10)
        assert any(p.name.endswith(".tar.zst") for p in blobs.iterdir()), "not collected yet"


async def test_a_live_snapshot_keeps_the_sandbox_running_and_replaces_older_ones(
    sandbox: HostSandbox, host: HostProcess
) -> None:
    assert await sandbox.snapshot() is None  # never had a workspace
    job = await sandbox.start_process("sleep 600")
    await sandbox.write_file("state", b"first")
    first = await sandbox.snapshot()
    assert first is not None and first["size"] > 0
    await sandbox.write_file("state", b"second")
    second = await sandbox.snapshot()
    assert second is not None and second["id"] != first["id"]
    status = await sandbox.status()
    assert status["state"] == "active"
    assert [p["running"] for p in status["processes"] if p["id"] == job["id"]] == [True]
    blobs = Path(host.blob_url.removeprefix("file://"))
    assert not (blobs / first["blob_key"]).exists()
    stored = (blobs / second["blob_key"]).read_bytes()
    assert hashlib.sha256(stored).hexdigest() == second["sha256"]
    # Asleep, the sandbox's snapshot is the one that holds it; asking wakes nothing.
    await sandbox.kill_process(job["id"])
    assert await sandbox.sleep()
    slept = await sandbox.snapshot()
    assert slept is not None and slept["id"] not in (first["id"], second["id"])
    assert (await sandbox.snapshot()) == slept
    assert (await sandbox.status())["state"] == "cold"
    assert await sandbox.read_file("state", max_bytes=10) == b"second"


async def test_a_destroyed_sandbox_acquired_again_gets_its_final_snapshot(
    client: HostClient, host: HostProcess
) -> None:
    sandbox = HostSandbox(client, new_id(), config())
    try:
        await sandbox.write_file("note", b"kept")
        assert await client.destroy(sandbox.sandbox_id) is not None
        assert not workspace_on_host(host, sandbox.sandbox_id).exists()
        assert await sandbox.read_file("note", max_bytes=10) == b"kept"
    finally:
        await client.destroy(sandbox.sandbox_id)


async def test_only_awake_time_counts_as_active(sandbox: HostSandbox) -> None:
    await sandbox.write_file("note", b"1")  # wakes it
    assert await sandbox.sleep()
    asleep = (await sandbox.status())["active_seconds"]
    assert asleep > 0
    await anyio.sleep(0.5)  # time passes while it sleeps ...
    assert (await sandbox.status())["active_seconds"] == asleep  # ... and is not counted
    await sandbox.read_file("note", max_bytes=10)  # awake again: counting again
    assert (await sandbox.status())["active_seconds"] > asleep


async def test_a_killed_host_keeps_the_awake_time_it_had_counted(
    tmp_path: Path, forker: ServeForker
) -> None:
    """Awake time is booked while awake too: a host killed (SIGKILL) with a
    sandbox awake once lost all of it since the wake (usage never booked)."""
    env = {"STEAD_SNAPSHOT_GC_INTERVAL_SECONDS": "0.1"}
    process = HostProcess(tmp_path / "state", env=env, forker=forker).start()
    sandbox_id = new_id()
    try:
        client = client_of(process)
        await HostSandbox(client, sandbox_id, config()).write_file("note", b"1")  # awake
        await client.aclose()
        with anyio.fail_after(WAIT):
            while (booked := catalogued_active_seconds(process, sandbox_id)) <= 0:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        process.kill()
        process.start()
        client = client_of(process)
        status = await client.sandbox_status(sandbox_id)
        assert status is not None and status["active_seconds"] >= booked
        await client.destroy(sandbox_id)
        await client.aclose()
    finally:
        process.stop()


def catalogued_active_seconds(process: HostProcess, sandbox_id: str) -> float:
    path = process.state_dir / "catalogue.sqlite3"
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        row = db.execute(
            "SELECT active_seconds FROM sandboxes WHERE id=?", (sandbox_id,)
        ).fetchone()
    return float(row[0]) if row else 0.0
