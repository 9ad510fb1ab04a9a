"""The hot routes (``api/hot.py``) only ever stand in front of FastAPI routes that
serve, document and validate the same calls."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Match

from stead.api import create_app
from stead.api.hot import HotRoute, hot_routes
from stead.config import Settings


def scope(method: str, path: str) -> dict[str, object]:
    return {"type": "http", "method": method, "path": path, "root_path": ""}


def test_each_hot_route_has_a_fastapi_twin_behind_it(tmp_path: Path) -> None:
    routes = create_app(Settings(data_dir=tmp_path)).routes
    hot = [r for r in routes if isinstance(r, HotRoute)]
    assert hot and routes[: len(hot)] == hot, "hot routes are matched first"
    twins = {(r.path, m) for r in routes if isinstance(r, APIRoute) for m in r.methods}
    for route in hot:
        assert route.methods is not None
        for method in route.methods:
            assert (route.path, method) in twins


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/sessions/sesn_1a2B-c_3/events"),
        ("POST", "/v1/agents"),
        ("POST", "/v1/sessions"),
    ],
)
def test_a_hot_route_takes_its_own_calls(method: str, path: str) -> None:
    assert any(r.matches(scope(method, path))[0] is Match.FULL for r in hot_routes())


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/sessions/sesn_1/events"),  # the list, not a send
        ("GET", "/v1/agents"),
        ("POST", "/v1/sessions/sesn_1"),
        ("POST", "/v1/sessions/sesn%00/events"),
        ("POST", "/v1/sessions/sesn_1\n/events"),  # FastAPI answers these ids with a 400
        ("POST", "/v1/sessions/" + "s" * 65 + "/events"),
    ],
)
def test_a_hot_route_leaves_every_other_call_to_fastapi(method: str, path: str) -> None:
    assert all(r.matches(scope(method, path))[0] is Match.NONE for r in hot_routes())
