"""Property-based hostile bodies for every POST route, sent as raw bytes.

Each example takes a valid body for its route and puts one hostile thing at one
path in it: a number or text stead cannot hold (an integer beyond 64 bits or of
thousands of digits, a literal that overflows to infinity, NaN, an unpaired
surrogate), nesting past the limit, a key given twice, or a value of the wrong
type. The first kinds must be a 400 naming that path; a wrong type may be
accepted (free-form objects take anything) but never a 5xx. Afterwards every
list still answers 200 and ``stead db check`` finds nothing to repair.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stead.testing import FakeModel, ServeForker, ServerProcess, client_tls
from tests.conftest import loop_env
from tests.integration.helpers import db_check

Json = dict[str, Any]
Path = tuple[str | int, ...]
EXAMPLES = int(os.environ.get("STEAD_FUZZ_EXAMPLES", "15"))
"""Examples per route and property; ``bench/fuzz.py`` raises it."""
MODEL = "claude-sonnet-4-6"
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}}}
TOOL = {"type": "custom", "name": "t", "description": "d", "input_schema": SCHEMA}
MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}
HOSTILE = {
    "integer beyond 64 bits": str(2**64),
    "integer of 5000 digits": "9" * 5000,
    "overflow to infinity": "1e400",
    "negative overflow": "-1e400",
    "NaN": "NaN",
    "Infinity": "Infinity",
    "unpaired surrogate": '"a\\udc00b"',
    "nesting past the limit": "[" * 70 + "]" * 70,
}
WRONG_TYPES = ("[]", "{}", "true", "null", '"text"', "0", "-1.5")


@dataclass(frozen=True)
class Route:
    name: str
    path: str
    body: Json


@dataclass(frozen=True)
class Raw:
    """JSON text put into a body verbatim."""

    text: str


def render(value: Any, duplicate_at: Path | None = None, here: Path = ()) -> str:
    """JSON text of ``value`` (``Raw`` verbatim); the object at ``duplicate_at`` gets its
    first key twice."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        items = [
            f"{json.dumps(k)}: {render(v, duplicate_at, (*here, k))}" for k, v in value.items()
        ]
        if here == duplicate_at and value:
            first = next(iter(value))
            items.append(f"{json.dumps(first)}: {render(value[first])}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return (
            "[" + ", ".join(render(v, duplicate_at, (*here, i)) for i, v in enumerate(value)) + "]"
        )
    return json.dumps(value)


def paths(value: Any, here: Path = ()) -> Iterator[Path]:
    """Every path in ``value`` below the root."""
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        yield (*here, key)
        yield from paths(child, (*here, key))


def replaced(value: Any, path: Path, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: replaced(v, rest, new) if k == head else v for k, v in value.items()}
    return [replaced(v, rest, new) if i == head else v for i, v in enumerate(value)]


def dotted(path: Path) -> str:
    return ".".join(["body", *map(str, path)])


@pytest.fixture(scope="module")
def hostile_server(
    tmp_path_factory: pytest.TempPathFactory, fake_model: FakeModel, forker: ServeForker
) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path_factory.mktemp("stead-hostile"), env=loop_env(fake_model), forker=forker
    )
    yield process.start()
    process.stop()


@pytest.fixture(scope="module")
def routes(hostile_server: ServerProcess) -> list[Route]:
    key = hostile_server.first_key
    assert key
    with httpx2.Client(
        verify=client_tls(), base_url=hostile_server.url, headers={"x-api-key": key}, timeout=30
    ) as http:

        def made(path: str, body: Json) -> str:
            response = http.post(path, json=body)
            assert response.status_code == 200, response.text
            return str(response.json()["id"])

        agent = {"name": "n", "model": MODEL, "tools": [TOOL], "metadata": {"team": "qa"}}
        agent_id = made("/v1/agents", agent)
        environment = {
            "name": "hostile",
            "config": {
                "type": "cloud",
                "networking": {"type": "limited", "allowed_hosts": ["example.com"]},
            },
            "metadata": {"k": "v"},
        }
        environment_id = made("/v1/environments", environment)
        session = {"agent": agent_id, "environment_id": environment_id, "metadata": {"k": "v"}}
        session_id = made("/v1/sessions", session)
    return [
        Route("agents.create", "/v1/agents", agent),
        Route("agents.update", f"/v1/agents/{agent_id}", {"version": 1, "tools": [TOOL]}),
        Route("environments.create", "/v1/environments", {**environment, "name": "other"}),
        Route(
            "environments.update", f"/v1/environments/{environment_id}", {"metadata": {"a": "b"}}
        ),
        Route("sessions.create", "/v1/sessions", session),
        Route(
            "sessions.update", f"/v1/sessions/{session_id}", {"title": "t", "metadata": {"a": "b"}}
        ),
        Route("events.send", f"/v1/sessions/{session_id}/events", {"events": [MESSAGE]}),
    ]


def post(server: ServerProcess, route: Route, raw: str) -> httpx2.Response:
    assert server.first_key
    headers = {"x-api-key": server.first_key, "content-type": "application/json"}
    return httpx2.post(
        server.url + route.path,
        content=raw.encode(),
        headers=headers,
        timeout=30,
        verify=client_tls(),
    )


def hostile_case(route: Route) -> st.SearchStrategy[tuple[Path, str]]:
    return st.tuples(st.sampled_from(list(paths(route.body))), st.sampled_from(sorted(HOSTILE)))


ROUTE_NAMES = [
    "agents.create", "agents.update", "environments.create", "environments.update",
    "sessions.create", "sessions.update", "events.send",
]  # fmt: skip


@pytest.mark.parametrize("name", ROUTE_NAMES)
def test_every_hostile_value_at_every_path_is_a_400_naming_it(
    hostile_server: ServerProcess, routes: list[Route], name: str
) -> None:
    route = next(r for r in routes if r.name == name)

    @given(case=hostile_case(route), duplicate=st.booleans())
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
    def check(case: tuple[Path, str], duplicate: bool) -> None:
        path, kind = case
        if duplicate:  # a key given twice in the object holding ``path``, instead
            parent = path[:-1]
            holder = route.body
            for part in parent:
                holder = holder[part]
            if not isinstance(holder, dict):
                return
            raw, where = render(route.body, duplicate_at=parent), (*parent, next(iter(holder)))
        else:
            raw, where = render(replaced(route.body, path, Raw(HOSTILE[kind]))), path
        response = post(hostile_server, route, raw)
        assert response.status_code == 400, (kind, where, response.text)
        message = response.json()["error"]["message"]
        assert message.startswith(dotted(where)), (kind, where, message)

    check()


@pytest.mark.parametrize("name", ROUTE_NAMES)
def test_a_wrong_type_at_any_path_is_never_a_server_error(
    hostile_server: ServerProcess, routes: list[Route], name: str
) -> None:
    route = next(r for r in routes if r.name == name)

    @given(path=st.sampled_from(list(paths(route.body))), value=st.sampled_from(WRONG_TYPES))
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
    def check(path: Path, value: str) -> None:
        response = post(hostile_server, route, render(replaced(route.body, path, Raw(value))))
        assert response.status_code in (200, 400, 404, 409), (path, value, response.text)
        if response.status_code != 200:
            assert response.json()["type"] == "error", response.text

    check()


def test_afterwards_every_read_answers_and_nothing_needs_repair(
    hostile_server: ServerProcess, routes: list[Route], forker: ServeForker
) -> None:
    assert hostile_server.first_key
    headers = {"x-api-key": hostile_server.first_key}
    with httpx2.Client(
        verify=client_tls(), base_url=hostile_server.url, headers=headers, timeout=30
    ) as http:
        for path in ("/v1/agents", "/v1/environments", "/v1/sessions"):
            listed = http.get(path, params={"limit": 100, "include_archived": "true"})
            assert listed.status_code == 200, listed.text
            for item in listed.json()["data"]:
                assert http.get(f"{path}/{item['id']}").status_code == 200
                if path == "/v1/sessions":
                    assert http.get(f"{path}/{item['id']}/events").status_code == 200
                if path == "/v1/agents":
                    assert http.get(f"{path}/{item['id']}/versions").status_code == 200
    checked = db_check(forker, hostile_server.data_dir)
    assert checked.returncode == 0 and "no problems found" in checked.stdout, checked
