"""Malformed requests over raw HTTP: each gets its 4xx in the error envelope and changes nothing.

``{name}`` in a case's path, headers, query values or (whole) body strings is filled from
the ids the ``world`` fixture made; ``names`` is text the error message must contain.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest

from stead.testing import ServeForker, ServerProcess, client_tls
from tests.integration.bad_input_cases import (
    AG,
    CASES,
    ERROR_TYPES,
    EV,
    PLACEHOLDER,
    SE,
    TOOLSET,
    A,
    Case,
    E,
    Json,
    S,
    agent,
    custom_tool,
    forge,
    msg,
    session,
)
from tests.integration.helpers import db_check, wait_idle_http


@dataclass
class World:
    http: httpx2.Client
    key: str
    other_key: str
    ids: dict[str, str]


def fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        found = PLACEHOLDER.match(value)
        return ids.get(found.group(1), value) if found else value
    if isinstance(value, list):
        return [fill(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, ids) for k, v in value.items()}
    return value


def send(world: World, case: Case) -> httpx2.Response:
    ids = world.ids
    content = case.raw
    if content is None and case.body is not None:
        content = json.dumps(fill(case.body, ids)).encode()
    headers = {"content-type": "application/json"} if content is not None else {}
    headers |= {k: v.format_map(ids) for k, v in case.headers.items()}
    headers = {k: v for k, v in headers.items() if v}  # "" leaves a header out
    headers |= {"x-api-key": world.key} if case.auth else {}
    params = {k: str(v).format_map(ids) for k, v in case.params.items()}
    request = world.http.build_request(
        case.method, case.path.format_map(ids), content=content, params=params, headers=headers
    )
    response = world.http.send(request, stream=True)
    if "text/event-stream" not in response.headers.get("content-type", ""):
        response.read()  # a wrongly accepted stream is left unread: it would never end
    response.close()
    return response


def check_error(response: httpx2.Response, status: int, names: str | None = None) -> None:
    """The status, exactly the error envelope, the request id, and a message that ``names``."""
    text = response.text if response.is_stream_consumed else "(an event stream)"
    assert response.status_code == status, f"got {response.status_code}, want {status}: {text}"
    body = response.json()
    assert set(body) == {"type", "error", "request_id"} and body["type"] == "error", body
    error = body["error"]
    assert error["type"] == ERROR_TYPES[status], body
    assert isinstance(error["message"], str) and error["message"], body
    assert set(error) <= {"type", "message", "details"}, body
    if "details" in error:
        assert isinstance(error["details"].get("error_code"), str), body
    assert re.fullmatch(r"req_[A-Za-z0-9]+", body["request_id"]), body
    assert response.headers.get("request-id") == body["request_id"]
    if names is not None:
        assert names in error["message"], f"message does not name {names!r}: {error['message']!r}"
    if status == 409:
        assert response.headers.get("x-should-retry") == "false"


def ok(response: httpx2.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def list_all(http: httpx2.Client, key: str, path: str, **params: Any) -> list[Json]:
    items: list[Json] = []
    while True:
        body = ok(http.get(path, params=params, headers={"x-api-key": key}))
        items += body["data"]
        if not body["next_page"]:
            return items
        params["page"] = body["next_page"]


def snapshot(world: World) -> Json:
    """Everything in both workspaces that a rejected request could have changed."""
    state: Json = {}
    for name, key in (("main", world.key), ("other", world.other_key)):
        every = {"limit": 100, "include_archived": "true"}
        sessions = list_all(world.http, key, S, **every)
        state[name] = {
            "agents": list_all(world.http, key, A, **every),
            "environments": list_all(world.http, key, E, **every),
            # stats.duration_seconds grows with the clock; nothing else may move
            "sessions": [{k: v for k, v in s.items() if k != "stats"} for s in sessions],
            "events": [list_all(world.http, key, f"{S}/{s['id']}/events") for s in sessions],
        }
    state["versions"] = list_all(world.http, world.key, AG.format_map(world.ids) + "/versions")
    return state


@pytest.fixture(scope="module")
def world(server: ServerProcess, api_key: str) -> Iterator[World]:
    other_key = server.create_key(new_workspace="other")
    # a fresh connection per request: a server failure must not break the next case
    limits = httpx2.Limits(max_keepalive_connections=0)
    with httpx2.Client(
        verify=client_tls(), base_url=server.url, timeout=30.0, limits=limits
    ) as http:

        def post(path: str, body: Json | None = None, key: str = api_key) -> str:
            return str(ok(http.post(path, json=body, headers={"x-api-key": key}))["id"])

        def cursor(path: str, **params: Any) -> str:
            page = ok(http.get(path, params={"limit": 1, **params}, headers={"x-api-key": api_key}))
            return str(page["next_page"])

        tag = uuid.uuid4().hex[:8]
        ids = {"key": api_key, "env_name": f"bad-input-{tag}"}
        tools = [TOOLSET, custom_tool(name="lookup")]
        ids["agent"] = post(A, agent(tools=tools, metadata={"team": "qa"}))
        post(AG.format_map(ids), {"system": "version two"})
        ids["agent_archived"] = post(A, agent())
        post(A + f"/{ids['agent_archived']}/archive")
        ids["env"] = post(E, {"name": ids["env_name"]})
        ids["env2"] = post(E, {"name": f"bad-input-2-{tag}"})
        ids["env_archived"] = post(E, {"name": f"bad-input-archived-{tag}"})
        post(E + f"/{ids['env_archived']}/archive")
        ids["session"] = post(S, fill(session(initial_events=[msg()]), ids))
        ids["session_archived"] = post(S, fill(session(initial_events=[msg(), msg()]), ids))
        for made in ("session", "session_archived"):
            wait_idle_http(http, api_key, ids[made])
        post(S + f"/{ids['session_archived']}/archive")
        ids["other_agent"] = post(A, agent(), other_key)
        ids["other_env"] = post(E, {"name": f"other-{tag}"}, other_key)
        other = {"agent": ids["other_agent"], "environment_id": ids["other_env"]}
        ids["other_session"] = post(S, other, other_key)
        post(A, agent(), other_key)
        only_user = {"types[]": "user.message"}
        first = ok(http.get(EV.format_map(ids), params=only_user, headers={"x-api-key": api_key}))
        first = first["data"][0]
        ids["user_event"] = first["id"]
        ids["agents_cursor"] = cursor(A, include_archived="true")
        ids["envs_cursor"] = cursor(E, include_archived="true")
        ids["sessions_asc_cursor"] = cursor(S, include_archived="true", order="asc")
        ids["events_cursor"] = cursor(S + f"/{ids['session_archived']}/events")
        ids["versions_cursor"] = cursor(AG.format_map(ids) + "/versions")
        with_other_key = {"limit": 1, "include_archived": "true"}
        others = ok(http.get(A, params=with_other_key, headers={"x-api-key": other_key}))
        ids["other_agents_cursor"] = str(others["next_page"])
        forged = {"l": f"events:{ids['session']}", "o": "asc", "d": "after", "k": ["x"]}
        ids["events_forged"] = forge(forged)
        yield World(http=http, key=api_key, other_key=other_key, ids=ids)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_request_gets_its_error_envelope(world: World, case: Case) -> None:
    names = case.names.format_map(world.ids) if case.names else None
    check_error(send(world, case), case.status, names)


def test_rejected_requests_change_nothing_and_the_server_keeps_answering(
    world: World, server: ServerProcess, forker: ServeForker
) -> None:
    changed: list[str] = []
    before = snapshot(world)
    for case in CASES:
        send(world, case)
        after = snapshot(world)
        if after != before:
            changed.append(case.id)
            before = after
    assert changed == [], f"rejected requests that changed stored data: {changed}"
    assert ok(world.http.get(A, headers={"authorization": f"Bearer {world.key}"}))["data"]
    checked = db_check(forker, server.data_dir)
    assert checked.returncode == 0 and "no problems found" in checked.stdout, checked


@pytest.fixture(scope="module")
def small_server(
    tmp_path_factory: pytest.TempPathFactory, forker: ServeForker
) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("stead-small")
    process = ServerProcess(data, env={"STEAD_MAX_REQUEST_BYTES": "4096"}, forker=forker).start()
    yield process
    process.stop()


def in_chunks(body: bytes) -> Iterator[bytes]:
    """Sent chunked, with no content-length to check up front."""
    for start in range(0, len(body), 1000):
        yield body[start : start + 1000]


@pytest.mark.parametrize(
    ("path", "chunked"),
    [(A, False), (A, True), (S, False), (S + "/sesn_x/events", False), (E, True)],
    ids=["agents-length", "agents-chunked", "sessions", "events-send", "envs-chunked"],
)
def test_body_over_the_limit_is_413(small_server: ServerProcess, path: str, chunked: bool) -> None:
    assert small_server.first_key
    headers = {"x-api-key": small_server.first_key, "content-type": "application/json"}
    raw = json.dumps(agent(system="x" * 5000)).encode()
    with httpx2.Client(verify=client_tls(), base_url=small_server.url, timeout=30.0) as http:
        response = http.post(path, content=in_chunks(raw) if chunked else raw, headers=headers)
        check_error(response, 413)
        assert ok(http.get(A, headers=headers))["data"] == []  # answers, and stored nothing
        assert ok(http.get(E, headers=headers))["data"] == []


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("DELETE", AG, "GET, POST"), ("PUT", A, "GET, POST"), ("PATCH", SE, "DELETE, GET, POST")],
    ids=["agent", "agents", "session"],
)
def test_405_names_the_methods_the_path_allows(
    world: World, method: str, path: str, allowed: str
) -> None:
    response = send(world, Case("allow", 405, method, path))
    check_error(response, 405)
    assert response.headers["allow"] == allowed
