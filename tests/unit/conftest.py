from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from stead.runtime import Embedder, SessionFeed
from stead.sandbox.local.sandbox import UnsafeLocalSandbox
from stead.store import EventRecord, NewEvent, SqlStore, Store, open_store
from stead.store.inmemory import InMemoryStore
from tests.databases import MEMORY

WAIT = 10.0
"""Longest a test waits for a process or file it started."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leaves out the in-memory runs of the tests marked ``sql``: they reach into
    a database the fake does not have."""
    kept, dropped = [], []
    for item in items:
        on_memory = (
            getattr(item, "callspec", None) and item.callspec.params.get("database_url") == MEMORY
        )
        (dropped if on_memory and item.get_closest_marker("sql") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """One per test process: each ``Embedder`` loads its own model (0.1 GB) on
    first use, and a worker's memory does not shrink back when one is dropped."""
    return Embedder()


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[SqlStore | InMemoryStore]:
    """The store on an empty database: SQLite, or each of ``tests.databases.BACKENDS``
    (or ``STORES``, the fake included) in a module parametrised with them."""
    if database_url == MEMORY:
        memory = InMemoryStore()
        yield memory
        await memory.close()
        return
    opened = await open_store(database_url)
    yield opened
    await opened.close()


class ManualClock:
    """A ``Clock`` that moves only when a test moves it (or something sleeps)."""

    def __init__(self) -> None:
        self.at = datetime.now(UTC)

    def now(self) -> datetime:
        return self.at

    async def sleep(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


def definition(name: str = "a") -> dict[str, Any]:
    return {
        "name": name,
        "description": None,
        "system": None,
        "model": {"id": "m", "effort": None, "inference_geo": None, "speed": None},
        "tools": [],
        "mcp_servers": [],
        "skills": [],
        "multiagent": None,
        "execution_identity": {"type": "service_account"},
        "metadata": {},
    }


async def new_session(store: Store) -> tuple[str, str]:
    """(workspace id, session id) of a fresh session."""
    workspace = await store.create_workspace("w")
    agent = await store.create_agent(workspace.id, definition())
    env = await store.create_environment(workspace.id, "env", None, {"type": "cloud"}, {}, None)
    session, _ = await store.create_session(
        workspace.id, (agent.id, None), lambda a: {"id": a.id}, env.id, {}, []
    )
    return workspace.id, session.id


async def leased_session(
    store: Store, *, ttl: float, now: datetime | None = None
) -> tuple[str, str]:
    """(workspace id, session id) of a fresh session whose sandbox holds a lease."""
    workspace_id, session_id = await new_session(store)
    session = await store.get_session(workspace_id, session_id)
    await store.acquire_sandbox_lease(
        session_id,
        workspace_id=workspace_id,
        session_id=session_id,
        environment_id=session.environment_id,
        agent_id=session.agent["id"],
        ttl_seconds=ttl,
        now=now,
    )
    return workspace_id, session_id


def user_message(event_id: str, text: str = "hi") -> NewEvent:
    return NewEvent(event_id, "user.message", {"content": [{"type": "text", "text": text}]})


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[UnsafeLocalSandbox]:
    async with UnsafeLocalSandbox(tmp_path / "ws", tmp_path / "state") as opened:
        yield opened


async def read_fifo(path: Path) -> str:
    """Blocks (off the loop, bounded) until a command writes a line to ``path``."""
    with anyio.fail_after(WAIT):
        return await anyio.to_thread.run_sync(path.read_text, abandon_on_cancel=True)


async def collect_feed(feed: SessionFeed, count: int) -> list[EventRecord]:
    """The next ``count`` events a reader's feed yields (waits at most ``WAIT``)."""
    got: list[EventRecord] = []
    with anyio.fail_after(WAIT):
        while len(got) < count:
            got += [item.event for item in await feed.next_batch()]
    return got
