"""What the console's browser tests share: the scripted model, the browser's
settings and the steps a test takes on a page (log in, open a session, send)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anthropic
from playwright.sync_api import Page, expect

from stead.testing import ServerProcess, Text, Thinking, ToolCall, Turn
from stead.testing.scripts import assistant_turns, echo

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000
"""Longest a step waits for the page to show what the server did."""
TOOLSET = {"type": "agent_toolset_20260401"}
SECRET = "sk-console-secret-never-shown"
SCENARIOS: dict[str, list[Turn]] = {
    "tools": [
        Turn(
            [
                Thinking("First a note, then read it back."),
                Text("Writing a note."),
                ToolCall("write", {"file_path": "notes.txt", "content": "hello console\n"}),
            ]
        ),
        Turn([ToolCall("bash", {"command": "cat notes.txt; echo sum=$((6 * 7))"})]),
        Turn([Text("All done.")]),
    ],
    "sleep": [Turn([ToolCall("bash", {"command": "sleep 60; echo woke"})])],
    "custom": [Turn([ToolCall("lookup", {"q": "weather"})]), Turn([Text("Thanks for looking.")])],
    "ask": [
        Turn([ToolCall("write", {"file_path": "asked.txt", "content": "approved\n"})]),
        Turn([Text("Written.")]),
    ],
    "refuse": [
        Turn(
            [Text("I can't help with that.")],
            stop_reason="refusal",
            stop_details={"type": "refusal", "category": "cyber", "explanation": "Unsafe."},
        )
    ],
}


def scripted(body: dict[str, Any]) -> Turn:
    """Plays the scenario the session's first message names, then echoes."""
    first = next(
        (
            block["text"]
            for message in body["messages"]
            if message["role"] == "user"
            for block in message["content"]
            if block.get("type") == "text"
        ),
        "",
    )
    turns = SCENARIOS.get(first.split(" ")[0], [])
    step = assistant_turns(body)
    return turns[step] if step < len(turns) else echo(body)


def log_in(page: Page, key: str) -> None:
    page.goto("/console/")
    page.fill("input[name=api_key]", key)
    page.click("#login button[type=submit]")
    expect(page.locator("#nav")).to_be_visible()


def new_session(sdk: anthropic.Anthropic, tools: list[dict[str, Any]]) -> str:
    agent = sdk.beta.agents.create(name="console", model="claude-sonnet-4-6", tools=tools)  # type: ignore[arg-type]
    env = sdk.beta.environments.create(name=f"console-{uuid.uuid4().hex[:8]}")
    return sdk.beta.sessions.create(agent=agent.id, environment_id=env.id).id


def open_session(
    page: Page, stead: ServerProcess, sdk: anthropic.Anthropic, tools: list[dict[str, Any]]
) -> str:
    """A new session, its page open in the console and its stream live."""
    assert stead.first_key
    session_id = new_session(sdk, tools)
    log_in(page, stead.first_key)
    page.goto(f"/console/#/sessions/{session_id}")
    expect(page.locator("#stream-state")).to_have_text("stream: live")
    return session_id


def send(page: Page, text: str) -> None:
    page.fill("#message", text)
    page.click("#composer button[type=submit]")


def turned_session(sdk: anthropic.Anthropic, agent_id: str) -> Any:
    """A new session of ``agent_id`` (in an environment of its own) that ran one turn."""
    env = sdk.beta.environments.create(name=f"console-{uuid.uuid4().hex[:8]}")
    used = sdk.beta.sessions.create(agent=agent_id, environment_id=env.id)
    with sdk.beta.sessions.events.stream(used.id) as stream:
        sdk.beta.sessions.events.send(
            used.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "hi"}]}]
        )
        next(e for e in stream if e.type == "session.status_idle")
    return used


def timeline_ids(page: Page) -> list[str]:
    return page.locator("#timeline > [data-id]").evaluate_all(
        "(nodes) => nodes.map(n => n.dataset.id)"
    )
