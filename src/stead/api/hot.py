"""The busiest routes, served without FastAPI's per-request machinery.

``agents.create``, ``sessions.create`` and ``events.send`` are matched first by
plain Starlette routes that call the very same handlers with the caller
authenticated (``deps.caller``): no dependency solving, no parameter models.
Everything else stays as it was: the middleware, the error envelope (the
app's exception handlers see what the handlers raise), and the FastAPI routes,
which keep documenting these paths and serve whatever a hot route declines
(another method, or a path id the API would refuse with its own 400).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from stead.api import agents, events, sessions
from stead.api.deps import caller
from stead.api.params import ID_PATTERN

_ID = re.compile(ID_PATTERN)


class HotRoute(Route):
    """A route that matches only its own method and well-formed path ids."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.FULL:
            return Match.NONE, {}
        if not all(_ID.fullmatch(value) for value in child["path_params"].values()):
            return Match.NONE, {}
        return match, child


async def _create_agent(request: Request) -> Response:
    return await agents.create_agent(request, await caller(request))


async def _create_session(request: Request) -> Response:
    return await sessions.create_session(request, await caller(request))


async def _send_events(request: Request) -> Response:
    session_id = request.path_params["session_id"]
    return await events.send_events(request, session_id, await caller(request))


def _post(path: str, endpoint: Callable[[Request], Awaitable[Response]]) -> HotRoute:
    return HotRoute(path, endpoint, methods=["POST"], include_in_schema=False)


def hot_routes() -> list[Route]:
    """To be matched before every other route."""
    return [
        _post("/v1/sessions/{session_id}/events", _send_events),
        _post("/v1/agents", _create_agent),
        _post("/v1/sessions", _create_session),
    ]
