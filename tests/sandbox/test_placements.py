"""A sandbox placed on one host after another (sandbox hosts on several
machines): two real hosts with their own state, uid ranges and TCP listeners
share one blob directory, and a brain's ``HostProvider`` sends each sandbox's
calls to the host its placement names. A host given a newer placement takes
the workspace from the latest snapshot any host took; one asked with an older
placement than it holds refuses."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from stead.sandbox import (
    HostAddress,
    HostClient,
    HostIdentity,
    HostSandbox,
    Placement,
    SandboxMoved,
    SandboxNotFound,
    SandboxUnavailable,
)
from stead.sandbox.providers.host import HostProvider
from stead.testing import HostProcess, ServeForker, free_port
from tests.sandbox.conftest import WAIT, config, new_id, requires_isolation, workspace_on_host

pytestmark = [pytest.mark.anyio, requires_isolation]
TOKEN = "shared-host-token"


def _host(root: Path, name: str, forker: ServeForker) -> HostProcess:
    port = free_port()
    return HostProcess(
        root / name,
        blob_url=f"file://{root / 'blobs'}",
        env={
            "STEAD_SANDBOX_HOST_LISTEN_TCP": f"127.0.0.1:{port}",
            "STEAD_SANDBOX_HOST_TOKEN": TOKEN,
        },
        forker=forker,
    )


@pytest.fixture(scope="module")
def hosts(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[tuple[HostProcess, HostProcess]]:
    root = tmp_path_factory.mktemp("placements")
    a, b = _host(root, "a", forker).start(), _host(root, "b", forker).start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture
async def brain(hosts: tuple[HostProcess, HostProcess]) -> AsyncIterator[HostProvider]:
    """A brain whose own host is A (its socket), reaching B over TCP."""
    provider = HostProvider(HostAddress(unix_path=hosts[0].socket_path), token=TOKEN)
    yield provider
    await provider.aclose()


def identity(host: HostProcess) -> HostIdentity:
    answer = host.call({"op": "ping"})["result"]
    return HostIdentity(answer["host_id"], answer["address"])


async def on(brain: HostProvider, host: HostProcess, sandbox_id: str, number: int) -> HostSandbox:
    brain.place(sandbox_id, Placement(identity(host), number))
    sandbox = await brain.acquire(sandbox_id, config())
    assert isinstance(sandbox, HostSandbox)
    return sandbox


async def destroy(*copies: HostSandbox) -> None:
    for copy in copies:
        await copy.client.destroy(copy.sandbox_id)


async def test_each_host_names_itself_and_where_it_is_reached(
    hosts: tuple[HostProcess, HostProcess], brain: HostProvider
) -> None:
    a, b = identity(hosts[0]), identity(hosts[1])
    assert a.host_id != b.host_id
    assert a.address is not None and a.address.startswith("tcp://127.0.0.1:")
    assert await brain.home() == a
    kept = (hosts[1].state_dir / "host-id").read_text().strip()
    assert kept == b.host_id  # in its state directory: the same after a restart


async def test_a_new_placement_takes_the_latest_snapshot_of_any_host(
    hosts: tuple[HostProcess, HostProcess], brain: HostProvider
) -> None:
    host_a, host_b = hosts
    sandbox_id = new_id()
    first = await on(brain, host_a, sandbox_id, 1)
    await first.write_file("kept", b"from a")
    assert await first.snapshot() is not None
    await first.write_file("late", b"after the snapshot")

    second = await on(brain, host_b, sandbox_id, 2)  # A counts as lost: B takes over
    assert second.client is not first.client
    assert await second.read_file("kept", max_bytes=100) == b"from a"
    assert (await second.exec("ls", op_key=new_id(), timeout=10)).output.split() == ["kept"]
    await second.write_file("more", b"from b")
    snapshot = await second.snapshot()
    assert snapshot is not None

    manifests = Path(host_b.blob_url.removeprefix("file://")) / "sandboxes" / sandbox_id
    named = json.loads((manifests / "placements" / f"{2:020d}.json").read_bytes())
    assert named["blob_key"] == snapshot["blob_key"]

    # Back on A, placed anew: A's own copy (with "late") gives way to B's snapshot.
    third = await on(brain, host_a, sandbox_id, 3)
    listed = (await third.exec("ls", op_key=new_id(), timeout=10)).output.split()
    assert listed == ["kept", "more"]
    assert await third.snapshot() is not None

    # A caller whose lease is older than the copy a host holds is refused.
    for client, older in ((third.client, 2), (second.client, 1)):
        stale = HostSandbox(client, sandbox_id, config(), placement=older)
        with pytest.raises(SandboxMoved):
            await stale.read_file("kept", max_bytes=100)
    await destroy(first, second)


@pytest.mark.parametrize("save", ["snapshot", "sleep"])
async def test_a_stale_copy_saved_before_the_new_host_restores_leaves_its_snapshot(
    hosts: tuple[HostProcess, HostProcess], brain: HostProvider, save: str
) -> None:
    """B took the sandbox from A's snapshot and has not restored it yet (it does
    at its first call) when A, thought lost, saves its stale copy (as its idle
    sleeper does after a restart). Before, A's new snapshot replaced the one B
    was to restore, and A deleted it: B's first call failed, WorkspaceUnavailable."""
    host_a, host_b = hosts
    sandbox_id = new_id()
    first = await on(brain, host_a, sandbox_id, 1)
    await first.write_file("kept", b"from a")
    assert await first.snapshot() is not None
    await first.write_file("late", b"after the snapshot")
    second = await on(brain, host_b, sandbox_id, 2)
    await second.acquire(wake=False)  # taken (as a mount put does), not restored yet

    assert await (first.snapshot() if save == "snapshot" else first.sleep()) is not None
    assert await second.read_file("kept", max_bytes=100) == b"from a"
    listed = (await second.exec("ls", op_key=new_id(), timeout=10)).output.split()
    assert listed == ["kept"]
    await destroy(first, second)


async def test_a_sandbox_never_snapshotted_starts_empty_on_its_new_host(
    hosts: tuple[HostProcess, HostProcess], brain: HostProvider
) -> None:
    host_a, host_b = hosts
    sandbox_id = new_id()
    first = await on(brain, host_a, sandbox_id, 1)
    await first.write_file("lost", b"never saved")
    second = await on(brain, host_b, sandbox_id, 2)
    assert (await second.exec("ls -A", op_key=new_id(), timeout=10)).output == ""
    await destroy(first, second)


@pytest.mark.parametrize("save", ["snapshot", "sleep", "destroy"])
async def test_a_host_that_lost_an_erased_sandbox_keeps_nothing_it_saves_later(
    hosts: tuple[HostProcess, HostProcess], brain: HostProvider, save: str
) -> None:
    """A's copy was taken over by B, and the sandbox erased through B (its
    session deleted); A, thought lost, saves its stale copy afterwards (a
    snapshot, a sleep, or a destroy's final snapshot): the erase's marker makes
    A delete what it saved and its own copy."""
    host_a, host_b = hosts
    sandbox_id = new_id()
    first = await on(brain, host_a, sandbox_id, 1)
    await first.write_file("private", b"stale copy")
    second = await on(brain, host_b, sandbox_id, 2)
    await second.write_file("private", b"current copy")
    assert await second.snapshot() is not None
    assert await second.client.destroy(sandbox_id, erase=True) is not None

    if save == "destroy":  # the copy was there, so destroyed: no error
        assert await first.client.destroy(sandbox_id) is not None
    else:
        with pytest.raises(SandboxNotFound, match="erased"):
            await (first.snapshot() if save == "snapshot" else first.sleep())
    blobs = Path(host_a.blob_url.removeprefix("file://")) / "sandboxes" / sandbox_id
    kept = [p.relative_to(blobs).as_posix() for p in blobs.rglob("*") if p.is_file()]
    assert kept == ["erased"]
    assert not workspace_on_host(host_a, sandbox_id).parent.parent.exists()  # nor its disk
    assert await first.client.sandbox_status(sandbox_id) is None


async def test_a_host_with_no_address_cannot_be_reached_by_others(
    brain: HostProvider,
) -> None:
    brain.place("far-away", Placement(HostIdentity("host_elsewhere", None), 1))
    with pytest.raises(SandboxUnavailable, match="no address"):
        await brain.acquire("far-away", config())


async def test_a_snapshot_a_host_took_before_placements_is_found_by_another_host(
    tmp_path: Path, forker: ServeForker
) -> None:
    """A host of a stead from before placements named no snapshot in a
    manifest: a sandbox asleep since then was found by no other host, and came
    back empty on one (as one never snapshotted does). Its own host, once
    upgraded, names that snapshot at placement 0 when it starts."""
    host_a, host_b = _host(tmp_path, "a", forker).start(), _host(tmp_path, "b", forker).start()
    brain = HostProvider(HostAddress(unix_path=host_a.socket_path), token=TOKEN)
    try:
        sandbox_id = new_id()
        unplaced = HostSandbox(
            HostClient(HostAddress(unix_path=host_a.socket_path)), sandbox_id, config()
        )
        await unplaced.write_file("kept", b"from before")
        assert await unplaced.sleep()
        await unplaced.client.aclose()
        blobs = Path(host_a.blob_url.removeprefix("file://")) / "sandboxes" / sandbox_id
        shutil.rmtree(blobs / "placements")  # as the earlier host left it
        host_a.kill()
        host_a.start()
        with anyio.fail_after(WAIT):
            while not (blobs / "placements").exists():  # noqa: ASYNC110
                await anyio.sleep(0.02)

        moved = await on(brain, host_b, sandbox_id, 1)
        assert await moved.read_file("kept", max_bytes=100) == b"from before"
        await destroy(moved)
    finally:
        await brain.aclose()
        host_a.stop()
        host_b.stop()
