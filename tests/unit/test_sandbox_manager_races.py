"""``SandboxManager`` under calls that race on one sandbox id: there is only
ever one live ``HostedSandbox`` per id, since each owns the sandbox's directory
and disk (two mounting one image at once corrupt it). The sandboxes here are
stand-ins whose destroy the test holds open; the catalogue is a real one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import anyio
import pytest

from stead.blobs import BlobConfig
from stead.sandbox import SandboxConfig
from stead.sandbox_host import manager as manager_module
from stead.sandbox_host.catalogue import Catalogue
from stead.sandbox_host.config import HostOptions
from stead.sandbox_host.manager import Isolation, SandboxManager
from stead.sandbox_host.uids import UidRange

pytestmark = pytest.mark.anyio
CONFIG = SandboxConfig.from_json({})


class StandIn:
    """A ``HostedSandbox`` whose destroy waits for ``proceed``."""

    made: list[StandIn]

    def __init__(self, row: Any, config: SandboxConfig, **_: Any) -> None:
        self.id = row.id
        self.config = config
        self.placement = None
        self.active_seconds = 1.0
        self.destroys = 0
        self.destroying = anyio.Event()
        self.proceed = anyio.Event()
        StandIn.made.append(self)

    async def destroy(self, *, erase: bool = False) -> None:
        self.destroys += 1
        self.destroying.set()
        await self.proceed.wait()


@pytest.fixture
async def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[SandboxManager]:
    StandIn.made = []
    monkeypatch.setattr(manager_module, "HostedSandbox", StandIn)
    options = HostOptions(tmp_path, tmp_path, BlobConfig("memory://"))
    catalogue = Catalogue.open(tmp_path / "catalogue.db")
    uids = UidRange(base=3_900_000, count=100, installer_uid=3_900_098, probe_uid=3_900_099)
    isolation = Isolation(cgroups=cast(Any, object()), uids=uids, tls=cast(Any, object()))
    try:
        async with anyio.create_task_group() as tasks:
            yield SandboxManager(
                options,
                catalogue=catalogue,
                blobs=cast(Any, None),
                isolation=isolation,
                isolation_problem=None,
                tasks=tasks,
            )
            tasks.cancel_scope.cancel()
    finally:
        catalogue.close()


async def test_a_destroy_that_raced_another_destroys_only_the_sandbox_made_since(
    manager: SandboxManager,
) -> None:
    """Destroy, acquire and destroy again, sent in that order while the first
    destroy runs: the second destroy must not destroy the first one's sandbox
    again (deleting the new one's disk and directory under it, and leaving its
    body running unknown to the manager), but the one the acquire made."""
    first = await manager.acquire("sbx_a", CONFIG)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(manager.destroy, "sbx_a")
        await first.destroying.wait()
        made: list[Any] = []

        async def acquire() -> None:
            made.append(await manager.acquire("sbx_a", CONFIG))

        tasks.start_soon(acquire)
        tasks.start_soon(manager.destroy, "sbx_a")
        await anyio.wait_all_tasks_blocked()
        first.proceed.set()
        with anyio.fail_after(5):
            while len(StandIn.made) < 2 or not StandIn.made[1].destroying.is_set():  # noqa: ASYNC110
                await anyio.sleep(0.01)
        second = StandIn.made[1]
        second.proceed.set()
    assert made == [second]
    assert (first.destroys, second.destroys) == (1, 1)
    assert "sbx_a" not in cast(Any, manager)._sandboxes


async def test_calls_queued_behind_a_destroy_share_one_lock_with_later_ones(
    manager: SandboxManager,
) -> None:
    """An acquire that waited on the destroy's lock, and one that comes after
    the destroy ends, make one sandbox between them, not one each."""
    first = await manager.acquire("sbx_a", CONFIG)
    got: list[Any] = []

    async def acquire() -> None:
        got.append(await manager.acquire("sbx_a", CONFIG))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(manager.destroy, "sbx_a")
        await first.destroying.wait()
        tasks.start_soon(acquire)  # queued behind the destroy
        await anyio.wait_all_tasks_blocked()
        first.proceed.set()
        tasks.start_soon(acquire)  # after it, maybe while the first still makes its own
    assert len(got) == 2 and got[0] is got[1]
    assert len(StandIn.made) == 2
