"""SIGKILL of ``stead serve`` between an agent's tool call and the write-back of
what it changed in a memory mount, and in the middle of the write-back: after a
restart on the same data directory the turn finishes and every change is one
memory version by the session, none lost and none doubled. Killed at exact
points (``STEAD_FAILPOINTS``): before the write-back, and after its first
change was committed (the other two not yet)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stead.testing import FakeModel, HostProcess, ServeForker
from tests.conftest import make_client
from tests.integration.helpers import message, wait_idle
from tests.sandbox.conftest import requires_isolation, serve_with_failpoints, shell

pytestmark = requires_isolation

MOUNT = "/mnt/memory/crash"
COMMAND = f"printf changed > {MOUNT}/a.md && printf made > {MOUNT}/b.md && rm {MOUNT}/c.md"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModel]:
    with FakeModel(shell) as model:
        yield model


@pytest.mark.parametrize("point", ["memories.before_writeback:1", "memories.after_writeback:1"])
def test_memory_changes_are_written_back_once_across_a_kill(
    point: str, fake: FakeModel, host: HostProcess, forker: ServeForker, tmp_path: Path
) -> None:
    server = serve_with_failpoints(tmp_path / "data", fake, host, forker, point)
    assert server.first_key
    with make_client(server.url, server.first_key) as client:
        store = client.beta.memory_stores.create(name="crash")
        for path in ("/a.md", "/c.md"):
            client.beta.memory_stores.memories.create(store.id, path=path, content="v0")
        agent = client.beta.agents.create(
            name="crash", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
        )
        environment = client.beta.environments.create(name="crash")
        session_id = client.beta.sessions.create(
            agent=agent.id,
            environment_id=environment.id,
            resources=[{"type": "memory_store", "memory_store_id": store.id}],
        ).id
        client.beta.sessions.events.send(session_id, events=[message(f"$ {COMMAND}")])
        assert server.wait_exit(timeout=60), f"not killed at {point}"
    server.kill()  # already dead: closes its log
    server = serve_with_failpoints(tmp_path / "data", fake, host, forker, None)
    try:
        assert server.first_key
        with make_client(server.url, server.first_key) as client:
            wait_idle(client, session_id, timeout=60)
            listed = client.beta.memory_stores.memories.list(store.id, view="full")
            current = {m.path: m.content for m in listed if m.type == "memory"}  # type: ignore[union-attr]
            assert current == {"/a.md": "changed", "/b.md": "made"}
            made = client.beta.memory_stores.memory_versions.list(store.id, session_id=session_id)
            assert sorted((v.operation, v.path) for v in made) == [
                ("created", "/b.md"),
                ("deleted", "/c.md"),
                ("modified", "/a.md"),
            ]
            results = [
                e
                for e in client.beta.sessions.events.list(session_id)
                if e.type == "agent.tool_result"
            ]
            assert len(results) == 1
    finally:
        server.stop()
