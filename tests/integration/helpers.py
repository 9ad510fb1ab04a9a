"""Small helpers shared by the integration tests."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2

from stead.testing import ServeForker


def db_check(forker: ServeForker, data_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``stead db check`` on ``data_dir`` (the server may be running)."""
    command = ("db", "check", "--data-dir", str(data_dir), *extra)
    return forker.complete(command, {"PATH": "/usr/bin:/bin"}, 60)


def new_session(client: anthropic.Anthropic, tools: list[dict[str, Any]] | None = None) -> str:
    """A session on a new agent (with ``tools``, if given) and environment."""
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    agent = client.beta.agents.create(name="t", model="claude-sonnet-4-6", **extra)
    env = client.beta.environments.create(name=f"t-{uuid.uuid4().hex[:10]}")
    return client.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def until_idle(stream: Any, idles: int = 1) -> list[Any]:
    """Events up to the ``idles``-th ``session.status_idle``."""
    seen: list[Any] = []
    for event in stream:
        seen.append(event)
        if event.type == "session.status_idle":
            idles -= 1
            if idles == 0:
                return seen
    raise AssertionError("the stream ended before the session went idle")


def kinds(events: list[Any]) -> list[str]:
    return [e.type for e in events]


def lifespan_failed(line: str) -> bool:
    """A server log line uvicorn writes when the app's lifespan failed: the
    runtime and its background tasks ended while HTTP may still answer."""
    return '"logger": "uvicorn.error"' in line and '"level": "error"' in line


def message(text: str) -> dict[str, Any]:
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def sse_frames(response: httpx2.Response) -> Iterator[dict[str, Any]]:
    """Parses an SSE body into frames {"event", "id", "data"} (pings included)."""
    frame: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in frame:
                yield frame
            frame = {}
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            frame[field] = json.loads(value) if field == "data" else value


def _wait_until_idle(status: Callable[[], str], session_id: str, timeout: float) -> None:
    """Polls ``status`` (bounded) until the agent loop has nothing left to do."""
    deadline = time.monotonic() + timeout
    while status() != "idle":
        if time.monotonic() > deadline:
            raise TimeoutError(f"session {session_id} still busy after {timeout}s")
        time.sleep(0.02)


def wait_idle(client: anthropic.Anthropic, session_id: str, timeout: float = 30.0) -> None:
    _wait_until_idle(lambda: client.beta.sessions.retrieve(session_id).status, session_id, timeout)


def send_and_wait(client: anthropic.Anthropic, session_id: str, event: dict[str, Any]) -> None:
    """Sends ``event`` and waits for the turn it starts to end."""
    client.beta.sessions.events.send(session_id, events=[event])  # type: ignore[list-item]
    wait_idle(client, session_id)


def wait_idle_http(http: httpx2.Client, key: str, session_id: str, timeout: float = 30.0) -> None:
    url = f"/v1/sessions/{session_id}"
    headers = {"x-api-key": key}
    _wait_until_idle(
        lambda: str(http.get(url, headers=headers).json()["status"]), session_id, timeout
    )


ANSWERS = {"agent.tool_use": "agent.tool_result", "agent.mcp_tool_use": "agent.mcp_tool_result"}
"""A tool use's type -> the type of the event that answers it."""
ANSWERED = {"agent.tool_result": "tool_use_id", "agent.mcp_tool_result": "mcp_tool_use_id"}
"""An answer's type -> its field naming the use it answers."""


def check_order(events: list[dict[str, Any]], point: str) -> None:
    """Every tool use (built-in or MCP) answered once, after it; every model span
    closed once, after it opened (``point`` names the case in a failure)."""
    position = {e["id"]: i for i, e in enumerate(events)}
    answered = Counter(e[ANSWERED[e["type"]]] for e in events if e["type"] in ANSWERED)
    for e in events:
        if e["type"] in ANSWERS:
            assert answered[e["id"]] == 1, (
                f"{point}: tool use {e['id']} answered {answered[e['id']]} times"
            )
        if e["type"] in ANSWERED:
            use = e[ANSWERED[e["type"]]]
            assert position[use] < position[e["id"]], f"{point}: result before its use"
        if e["type"] == "span.model_request_end":
            assert position[e["model_request_start_id"]] < position[e["id"]], f"{point}: span order"
    closed = Counter(
        e["model_request_start_id"] for e in events if e["type"] == "span.model_request_end"
    )
    for e in events:
        if e["type"] == "span.model_request_start":
            assert closed[e["id"]] == 1, f"{point}: span {e['id']} closed {closed[e['id']]} times"
