"""An in-process agent loop for benchmarks: store, bus and runtime on a temp
directory, talking to a fake model; no HTTP API in between."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from stead.config import Settings
from stead.ids import new_id
from stead.runtime import (
    LocalBus,
    McpGateway,
    Runtime,
    SandboxToolbox,
    SessionCredentials,
    build_loop,
)
from stead.sandbox import open_provider
from stead.schemas import agents
from stead.store import NewEvent, SqlStore, open_store
from stead.vault import load_secret_box


@dataclass
class Loop:
    store: SqlStore
    bus: LocalBus
    runtime: Runtime
    workspace_id: str
    agent_id: str
    environment_id: str

    async def new_session(self) -> str:
        session, _ = await self.store.create_session(
            self.workspace_id,
            (self.agent_id, None),
            lambda a: {"id": a.id, "type": "agent", "version": a.version, **a.definition},
            self.environment_id,
            {},
            [],
        )
        return session.id

    async def turn(self, session_id: str, text: str) -> None:
        """Sends a message and waits until the session is idle again."""
        message = NewEvent(
            new_id("event"), "user.message", {"content": [{"type": "text", "text": text}]}
        )
        with self.bus.subscribe(session_id) as subscription:
            accepted = await self.store.accept_user_events(
                self.workspace_id, session_id, [message], lambda _s, _l: None
            )
            self.runtime.committed(session_id, accepted.echoes, queued=True)
            while True:
                notices, _ = await subscription.take()
                if any(n.event.type == "session.status_idle" for n in notices):
                    return


@asynccontextmanager
async def running_loop(data_dir: Path, model_url: str, tools: bool) -> AsyncIterator[Loop]:
    settings = Settings(
        data_dir=data_dir,
        upstream_base_url=model_url,
        anthropic_api_key="bench-key-for-the-fake-model",
        log_level="warning",
        # Tool calls are answered without a sandbox: the loop is measured, not
        # the sandboxes (bench/sandbox_*.py measure those).
        sandbox="off",
    )
    store = await open_store(settings.resolved_database_url)
    bus = LocalBus(settings.sse_subscriber_buffer)
    box = load_secret_box(settings)
    toolbox = SandboxToolbox(
        settings, store, open_provider(settings), SessionCredentials(store, box)
    )
    mcp = McpGateway(settings, store, box)
    deps = build_loop(settings, store, bus, toolbox, mcp)
    runtime = Runtime(deps, exclusive=True)
    try:
        async with anyio.create_task_group() as group:
            await group.start(runtime.serve)
            workspace = await store.create_workspace("bench")
            body = {"name": "bench", "model": "claude-sonnet-4-6"}
            if tools:
                body["tools"] = [{"type": "agent_toolset_20260401"}]
            agent = await store.create_agent(workspace.id, agents.definition_from_create(body))
            env = await store.create_environment(
                workspace.id, "bench", None, {"type": "cloud"}, {}, None
            )
            yield Loop(store, bus, runtime, workspace.id, agent.id, env.id)
            group.cancel_scope.cancel()
    finally:
        await store.close()
