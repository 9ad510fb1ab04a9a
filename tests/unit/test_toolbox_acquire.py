"""``SandboxToolbox``: a session's sandbox is got under that sandbox's own lock
only. Before, every acquire also held one lock of the whole toolbox, so one
sandbox slow to come (a wake from a far blob store, a host placing it) held up
every other session's first call meanwhile."""

from __future__ import annotations

import anyio
import pytest

from stead.config import Settings
from stead.runtime.credentials import SessionCredentials
from stead.runtime.toolbox import SandboxToolbox
from stead.sandbox import Sandbox, SandboxConfig
from stead.store.inmemory import InMemoryStore
from stead.testing import MemoryProvider
from stead.vault import SecretBox
from stead.vault.keys import new_key
from tests.unit.conftest import new_session

pytestmark = pytest.mark.anyio
WAIT = 10.0


class StallingProvider(MemoryProvider):
    """Sandboxes whose acquire waits for ``go`` while ``stalled`` names them."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled: set[str] = set()
        self.reached = anyio.Event()
        self.go = anyio.Event()

    async def acquire(self, sandbox_id: str, config: SandboxConfig) -> Sandbox:
        if sandbox_id in self.stalled:
            self.reached.set()
            await self.go.wait()
        return await super().acquire(sandbox_id, config)


async def test_a_sandbox_slow_to_come_holds_up_no_other_session() -> None:
    store, provider = InMemoryStore(), StallingProvider()
    toolbox = SandboxToolbox(
        Settings(), store, provider, SessionCredentials(store, SecretBox(new_key()))
    )
    _, slow = await new_session(store)
    _, other = await new_session(store)
    provider.stalled.add(slow)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(toolbox.run, slow, "bash", {"command": "echo slow"}, "op-slow")
        with anyio.fail_after(WAIT):
            await provider.reached.wait()
            outcome = await toolbox.run(other, "bash", {"command": "echo other"}, "op-other")
        assert not outcome.is_error, outcome
        provider.go.set()
    assert toolbox.served == 2
