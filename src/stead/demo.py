"""``stead demo``: one short agent session, end to end, offline.

The model is stead's scripted fake upstream, not a real model: it writes a file
with bash, reads it back and answers. Everything else is real: a stead server
on loopback with its store, agent loop and an ``unsafe_local`` sandbox in a
temporary directory, driven through the official ``anthropic`` SDK.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anthropic
import anyio
import uvicorn
from rich.console import Console

from stead.api import create_app
from stead.api.server import Server
from stead.config import Settings
from stead.store import open_store
from stead.testing import FakeModel, Text, ToolCall, Turn, free_port

SCRIPT = [
    Turn(
        [
            Text("I'll write a greeting to a file with bash."),
            ToolCall(
                "bash", {"command": "echo 'hello from stead' > greeting.txt && ls -l greeting.txt"}
            ),
        ]
    ),
    Turn([Text("Now I'll read it back."), ToolCall("read", {"file_path": "greeting.txt"})]),
    Turn([Text("The file greeting.txt says: hello from stead.")]),
]
START_TIMEOUT = 30.0


def _describe(event: Any) -> str:
    kind = event.type
    if kind in ("user.message", "agent.message"):
        return " ".join(b.text for b in event.content if getattr(b, "type", "") == "text")
    if kind == "agent.tool_use":
        return f"{event.name} {event.input}"
    if kind == "agent.tool_result":
        text = " ".join(getattr(b, "text", "") for b in event.content or [])
        return ("error: " if event.is_error else "") + text.strip().replace("\n", " | ")
    if kind == "span.model_request_end":
        usage = event.model_usage
        return f"{usage.input_tokens} tokens in, {usage.output_tokens} out"
    if kind == "session.status_idle":
        return f"stop reason: {event.stop_reason.type}"
    return ""


def run_demo(console: Console) -> None:
    with tempfile.TemporaryDirectory(prefix="stead-demo-") as tmp, FakeModel(SCRIPT) as fake:
        data_dir = Path(tmp)
        settings = Settings(
            data_dir=data_dir,
            port=free_port(),
            upstream_base_url=fake.url,
            anthropic_api_key="demo-key-for-the-scripted-model",
            sandbox="unsafe_local",
            log_level="warning",
        )
        server = Server(
            uvicorn.Config(
                create_app(settings),
                host="127.0.0.1",
                port=settings.port,
                log_level="warning",
                timeout_graceful_shutdown=1,
            )
        )
        thread = threading.Thread(target=server.run, name="stead-demo-server", daemon=True)
        thread.start()
        try:
            _wait_started(server)
            _session(console, settings, data_dir)
        finally:
            server.should_exit = True
            thread.join(timeout=10)


def _wait_started(server: uvicorn.Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the demo server did not start")
        time.sleep(0.02)


def _session(console: Console, settings: Settings, data_dir: Path) -> None:
    console.print(
        "[bold]stead demo[/bold]: the model here is [bold]scripted[/bold] (stead's fake "
        "upstream, no real model is called); the server, store, agent loop and sandbox are real."
    )
    console.print(f"sandbox: unsafe_local (no isolation) in {data_dir / 'sandboxes'}\n")
    key = _make_key(settings)
    with anthropic.Anthropic(base_url=f"http://127.0.0.1:{settings.port}", api_key=key) as client:
        agent = client.beta.agents.create(
            name="demo", model="claude-sonnet-4-6", tools=[{"type": "agent_toolset_20260401"}]
        )
        env = client.beta.environments.create(name="demo")
        session = client.beta.sessions.create(agent=agent.id, environment_id=env.id)
        with client.beta.sessions.events.stream(session.id) as stream:
            text = "Write a greeting to a file, read it back and tell me what it says."
            client.beta.sessions.events.send(
                session.id,
                events=[{"type": "user.message", "content": [{"type": "text", "text": text}]}],
            )
            for event in stream:
                console.print(f"[cyan]{event.type:<26}[/cyan] {_describe(event)}", markup=True)
                if event.type == "session.status_idle":
                    break


def _make_key(settings: Settings) -> str:
    async def create() -> str:
        store = await open_store(settings.resolved_database_url)
        try:
            workspace = await store.create_workspace("demo")
            return (await store.create_api_key(workspace.id, "demo"))[1]
        finally:
            await store.close()

    return anyio.run(create)
