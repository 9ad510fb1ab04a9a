"""Spans of one tool turn, captured with OpenTelemetry's in-memory exporter.

The app runs in this process (uvicorn on a loopback port, in a thread) so the
test can hand it the exporter; it is driven through the official SDK like any
server, and its model is the fake, over HTTP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from stead.api import create_app
from stead.cli_support import opened
from stead.config import Settings
from stead.telemetry import Metrics, Telemetry, open_tracing
from stead.testing import FakeModel, Text, ToolCall, Turn
from stead.testing.scripts import assistant_turns
from stead.testing.server import free_port
from tests.conftest import make_client
from tests.integration.helpers import message, new_session, wait_idle

START_SECONDS = 30.0
TOOLSET = {"type": "agent_toolset_20260401"}


def one_tool(body: dict[str, Any]) -> Turn:
    if assistant_turns(body) == 0:
        return Turn([ToolCall("bash", {"command": "echo traced"})])
    return Turn([Text("done")])


async def _key(settings: Settings) -> str:
    async with opened(settings) as store:
        workspace = await store.create_workspace("traces")
        return (await store.create_api_key(workspace.id, "traces"))[1]


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[str, str, InMemorySpanExporter, FakeModel]]:
    exporter = InMemorySpanExporter()
    with FakeModel(one_tool) as fake:
        settings = Settings(
            data_dir=tmp_path,
            host="127.0.0.1",
            port=free_port(),
            upstream_base_url=fake.url,
            anthropic_api_key="test-key-for-the-fake-model",
            sandbox="unsafe_local",
        )
        key = anyio.run(_key, settings)
        telemetry = Telemetry(Metrics(), open_tracing(settings, exporter))
        app = create_app(settings, telemetry=telemetry)
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=settings.port, log_config=None)
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + START_SECONDS
        while not server.started:  # bounded: uvicorn offers no event to wait on
            assert thread.is_alive() and time.monotonic() < deadline, "the app did not start"
            time.sleep(0.02)
        try:
            yield f"http://127.0.0.1:{settings.port}", key, exporter, fake
        finally:
            server.should_exit = True
            thread.join(START_SECONDS)


def _children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def test_the_span_tree_of_one_tool_turn(
    traced: tuple[str, str, InMemorySpanExporter, FakeModel],
) -> None:
    url, key, exporter, fake = traced
    with make_client(url, key) as client:
        session_id = new_session(client, [TOOLSET])
        client.beta.sessions.events.send(session_id, events=[message("go")])  # type: ignore[list-item]
        wait_idle(client, session_id)
    spans = list(exporter.get_finished_spans())
    turns = [s for s in spans if s.name == "turn"]
    assert len(turns) == 1
    turn = turns[0]
    assert turn.attributes is not None and turn.attributes["stead.session_id"] == session_id
    # The request that queued the turn started the session's actor; the turn
    # still starts a trace of its own (before, it sat beneath that request).
    assert turn.parent is None
    sent_events = [s for s in spans if s.name == "POST /v1/sessions/{session_id}/events"]
    assert len(sent_events) == 1 and sent_events[0].context.trace_id != turn.context.trace_id
    below = _children(spans, turn)
    assert [s.name for s in below] == ["model call", "tool call", "model call"]
    tool = below[1]
    assert tool.attributes is not None
    assert (tool.attributes["stead.tool.kind"], tool.attributes["stead.tool.name"]) == (
        "builtin",
        "bash",
    )
    assert [s.name for s in _children(spans, tool)] == ["sandbox acquire"]
    assert all(s.context.trace_id == turn.context.trace_id for s in below)

    # Each model request carried its own span's trace context to the provider.
    model_calls = {format(s.context.span_id, "016x") for s in below if s.name == "model call"}
    sent = {r.headers.get("traceparent", "") for r in fake.requests if r.path.endswith("/messages")}
    assert {header.split("-")[2] for header in sent if header} == model_calls

    requests = [s for s in spans if s.name == "POST /v1/agents"]
    assert len(requests) == 1
    assert requests[0].attributes is not None
    assert requests[0].attributes["http.response.status_code"] == 200


CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


def test_a_request_joins_its_caller_s_trace_and_its_turn_starts_its_own(
    traced: tuple[str, str, InMemorySpanExporter, FakeModel],
) -> None:
    """Before, every request's span was a root: a caller's trace stopped at stead."""
    url, key, exporter, _ = traced
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    with make_client(url, key) as client:
        session_id = new_session(client, [TOOLSET])
        client.beta.sessions.events.send(
            session_id,
            events=[message("go")],  # type: ignore[list-item]
            extra_headers=caller,
        )
        wait_idle(client, session_id)
    spans = list(exporter.get_finished_spans())
    [sent] = [s for s in spans if s.name == "POST /v1/sessions/{session_id}/events"]
    assert sent.parent is not None and sent.parent.is_remote
    assert (sent.context.trace_id, sent.parent.span_id) == (
        int(CALLER_TRACE, 16),
        int(CALLER_SPAN, 16),
    )
    [turn] = [s for s in spans if s.name == "turn"]
    assert turn.parent is None and turn.context.trace_id != int(CALLER_TRACE, 16)
    [created] = [s for s in spans if s.name == "POST /v1/sessions"]
    assert created.parent is None  # no traceparent: a trace of its own, as before


def test_a_request_s_span_names_a_method_as_its_metrics_label_it(
    traced: tuple[str, str, InMemorySpanExporter, FakeModel],
) -> None:
    """Methods past the usual ones are _OTHER, as OpenTelemetry names them (the
    span's name says HTTP); before, the span carried the method as sent."""
    url, key, exporter, _ = traced
    with httpx2.Client(base_url=url, headers={"x-api-key": key}, timeout=10) as http:
        assert http.request("PROPFIND", "/v1/agents").status_code == 405
        assert http.get("/v1/agents").status_code == 200
    spans = {s.name: s for s in exporter.get_finished_spans()}
    odd = spans["HTTP /v1/agents"].attributes
    assert odd is not None
    assert (odd["http.request.method"], odd["http.request.method_original"]) == (
        "_OTHER",
        "PROPFIND",
    )
    usual = spans["GET /v1/agents"].attributes
    assert usual is not None and usual["http.request.method"] == "GET"
    assert "http.request.method_original" not in usual
