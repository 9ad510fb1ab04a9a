"""Operating a server: health checks, Prometheus metrics moving as requests and
turns happen, and the log (JSON lines, an access line per request, a line per
turn and per tool error) holding no secret and no command text."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from stead.testing import (
    FakeModel,
    ServeForker,
    ServerProcess,
    Text,
    ToolCall,
    Turn,
    client_tls,
    free_port,
)
from stead.testing.scripts import assistant_turns
from tests.conftest import loop_env, make_client, sdk_of
from tests.integration.helpers import message, new_session, wait_idle

LOG_WAIT = 10.0

Json = dict[str, Any]
TOOLSET = {"type": "agent_toolset_20260401"}
COMMAND_MARK = "cmd-text-7f3a"
"""Text of a terminal command: it must never reach the log."""


def scripted(body: Json) -> Turn:
    """First answer: a bash call, then a read of a missing file (a tool error); then text."""
    step = assistant_turns(body)
    if step == 0:
        return Turn([ToolCall("bash", {"command": "echo hi"})])
    if step == 1:
        return Turn([ToolCall("read", {"file_path": "no-such-file.txt"})])
    return Turn([Text("done")])


@pytest.fixture(scope="module")
def ops_server(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    with FakeModel(scripted) as fake:
        process = ServerProcess(
            tmp_path_factory.mktemp("ops"), env=loop_env(fake), forker=forker
        ).start()
        yield process
        process.stop()


def samples(server: ServerProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``/metrics`` parsed by prometheus_client's parser: (name, labels) -> value."""
    answer = httpx2.get(
        f"{server.url}/metrics",
        headers={"x-api-key": server.first_key or ""},
        timeout=30,
        verify=client_tls(),
    )
    assert answer.status_code == 200, answer.text
    found = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def log_lines(server: ServerProcess) -> list[Json]:
    """The server's JSON log lines (its start-up banner on stdout is plain text)."""
    return [json.loads(line) for line in server.log_text().splitlines() if line.startswith("{")]


def logged(server: ServerProcess, match: Callable[[Json], bool]) -> list[Json]:
    """The log lines ``match`` picks, once there are any: a line is written as
    a response or a turn ends, which the client may see first."""
    deadline = time.monotonic() + LOG_WAIT
    while True:
        found = [line for line in log_lines(server) if match(line)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_health_answers_without_a_key(ops_server: ServerProcess) -> None:
    assert httpx2.get(f"{ops_server.url}/healthz", timeout=30, verify=client_tls()).json() == {
        "status": "ok"
    }
    ready = httpx2.get(f"{ops_server.url}/readyz", timeout=30, verify=client_tls())
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"store": "ok", "blobs": "ok"}}


def unanswered_blobs() -> dict[str, str]:
    """A server's settings whose S3 blob store is a loopback port nothing listens on."""
    closed = free_port()
    return {
        "STEAD_SANDBOX": "off",
        "STEAD_BLOB_URL": "s3://stead-blobs",
        "STEAD_S3_ENDPOINT": f"http://127.0.0.1:{closed}",
        "STEAD_S3_ACCESS_KEY_ID": "id",
        "STEAD_S3_SECRET_ACCESS_KEY": "secret",
        "STEAD_BLOB_TIMEOUT_SECONDS": "2",
    }


def test_readiness_names_a_blob_store_that_does_not_answer(
    tmp_path: Path, forker: ServeForker
) -> None:
    server = ServerProcess(tmp_path / "data", env=unanswered_blobs(), forker=forker).start()
    try:
        ready = httpx2.get(f"{server.url}/readyz", timeout=30, verify=client_tls())
    finally:
        server.stop()
    assert ready.status_code == 503
    body = ready.json()
    assert body["status"] == "unready" and body["checks"]["store"] == "ok"
    assert body["checks"]["blobs"].startswith("failed")


def test_a_request_s_own_log_lines_carry_its_request_id(
    tmp_path: Path, forker: ServeForker
) -> None:
    """An upload to a blob store that does not answer: the 503 tells the client
    to quote its request id, and each line the request logged carries it as
    ``request_id`` (before, only the access line did)."""
    server = ServerProcess(tmp_path / "data", env=unanswered_blobs(), forker=forker).start()
    try:
        answer = httpx2.post(
            f"{server.url}/v1/files",
            headers={"x-api-key": server.first_key or ""},
            files={"file": ("a.txt", b"hi")},
            timeout=30,
            verify=client_tls(),
        )
        assert answer.status_code == 503, answer.text
        request_id = answer.headers["request-id"]
        # The access line is the request's last: the others come before it.
        assert logged(
            server,
            lambda line: line["logger"] == "stead.access" and line.get("request_id") == request_id,
        )
        lines = [line for line in log_lines(server) if line.get("request_id") == request_id]
    finally:
        server.stop()
    assert {line["logger"] for line in lines} >= {"stead.access", "stead.api"}, lines


def test_a_sandbox_host_address_where_something_else_answers_leaves_scrapes_working(
    tmp_path: Path, forker: ServeForker
) -> None:
    """STEAD_SANDBOX_HOST names a port where another service answers (an HTTP
    server, not the host protocol): /metrics still serves, and /readyz names
    the host as unreachable (before, each was a 500 with a traceback)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(8)
        port = other.getsockname()[1]

        def answer_http() -> None:
            with contextlib.suppress(OSError):  # until the listener closes
                while True:
                    conn, _ = other.accept()
                    with contextlib.suppress(OSError), conn:
                        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        threading.Thread(target=answer_http, daemon=True).start()
        env = {
            "STEAD_SANDBOX": "bwrap",
            "STEAD_SANDBOX_HOST": f"tcp://127.0.0.1:{port}",
            "STEAD_SANDBOX_HOST_TOKEN": "t" * 32,
            "STEAD_METRICS": "open",
        }
        server = ServerProcess(tmp_path / "data", env=env, forker=forker).start()
        try:
            scraped = httpx2.get(f"{server.url}/metrics", timeout=30, verify=client_tls())
            ready = httpx2.get(f"{server.url}/readyz", timeout=30, verify=client_tls())
        finally:
            server.stop()
    assert scraped.status_code == 200, scraped.text
    assert "stead_http_requests_total" in scraped.text
    assert ready.status_code == 503, ready.text
    assert ready.json()["checks"]["sandbox_host"].startswith("unreachable: ")
    assert "unhandled error" not in server.log_text()


def test_metrics_need_a_key_by_default(ops_server: ServerProcess) -> None:
    answer = httpx2.get(f"{ops_server.url}/metrics", timeout=30, verify=client_tls())
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"


def test_metrics_move_with_requests_and_a_tool_turn(ops_server: ServerProcess) -> None:
    before = samples(ops_server)
    with sdk_of(ops_server) as client:
        session_id = new_session(client, [TOOLSET])
        client.beta.sessions.events.send(session_id, events=[message("go")])  # type: ignore[list-item]
        wait_idle(client, session_id)
        with pytest.raises(anthropic.NotFoundError):
            client.beta.agents.retrieve("agent_" + "0" * 26)
    after = samples(ops_server)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("stead_http_requests_total", method="POST", route="/v1/agents", status="200") == 1
    assert (
        moved(
            "stead_http_requests_total", method="GET", route="/v1/agents/{agent_id}", status="404"
        )
        == 1
    )
    assert (
        moved("stead_http_request_duration_seconds_count", method="POST", route="/v1/agents") == 1
    )
    assert moved("stead_turns_total", outcome="end_turn") == 1
    assert moved("stead_model_calls_total", model="claude-sonnet-4-6", outcome="ok") == 3
    assert moved("stead_model_tokens_total", model="claude-sonnet-4-6", kind="output") > 0
    assert moved("stead_tool_calls_total", kind="builtin", outcome="ok") == 1
    assert moved("stead_tool_calls_total", kind="builtin", outcome="error") == 1
    assert moved("stead_tool_call_duration_seconds_count", kind="builtin") == 2
    assert value(after, "stead_queued_runs") == 0

    turns = logged(
        ops_server,
        lambda line: line["message"].startswith("turn ended") and line["session_id"] == session_id,
    )
    assert any(line["outcome"] == "end_turn" for line in turns)
    # A turn is no part of the request that queued it (nor of the one that
    # started its session's actor): its lines carry no request id.
    assert not any("request_id" in line for line in turns)
    failed = logged(ops_server, lambda line: line["message"] == "tool call failed")
    assert any(line["session_id"] == session_id and line["tool"] == "read" for line in failed)


def test_an_access_line_per_request_by_route_template(ops_server: ServerProcess) -> None:
    with sdk_of(ops_server) as client:
        answer = client.beta.agents.with_raw_response.list(limit=1)
    request_id = answer.headers["request-id"]
    found = logged(ops_server, lambda line: line.get("request_id") == request_id)
    assert len(found) == 1
    line = found[0]
    assert line["logger"] == "stead.access"
    assert (line["method"], line["route"], line["status"]) == ("GET", "/v1/agents", 200)
    assert line["duration_ms"] >= 0
    assert "limit" not in json.dumps(line)  # never the query string


def test_the_log_holds_no_key_and_no_command_text(ops_server: ServerProcess) -> None:
    key = ops_server.create_key()  # the first key is printed at start, by design
    url = ops_server.url.replace("http", "ws", 1)
    with make_client(ops_server.url, key) as client:
        session_id = new_session(client)
    query = f"command=echo+{COMMAND_MARK}&token={key}"
    with connect(
        f"{url}/v1/sessions/{session_id}/sandbox/exec?{query}",
        additional_headers={"x-api-key": key},
        open_timeout=30,
    ) as socket:
        for _ in range(100):  # until the server closes it (the command ran, or was refused)
            try:
                socket.recv(timeout=30)
            except Exception:
                break
    httpx2.get(f"{ops_server.url}/v1/agents?secret={key}", timeout=30, verify=client_tls())
    text = ops_server.log_text()
    assert COMMAND_MARK not in text
    assert key not in text
    socket_lines = [line for line in log_lines(ops_server) if "WebSocket" in line["message"]]
    assert socket_lines, "uvicorn logs each WebSocket (its query cut off)"
    assert any(
        line.get("route") == "/v1/sessions/{session_id}/sandbox/exec"
        for line in log_lines(ops_server)
    )


def test_metrics_open_or_off_as_set(
    fake_model: FakeModel, tmp_path: Any, forker: ServeForker
) -> None:
    for setting, status in (("open", 200), ("off", 404)):
        process = ServerProcess(
            tmp_path / setting, env=loop_env(fake_model, STEAD_METRICS=setting), forker=forker
        ).start()
        try:
            assert (
                httpx2.get(f"{process.url}/metrics", timeout=30, verify=client_tls()).status_code
                == status
            )
        finally:
            process.stop()
