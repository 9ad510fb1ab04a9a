"""The request series' labels are bounded: a method the API never serves
(PROPFIND, MKCOL ...: the server's parser takes some thirty) is labelled
``_OTHER``, or anyone could add a series per method and route."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio

from stead.api.observe import TelemetryMiddleware
from stead.telemetry import Telemetry
from stead.telemetry.metrics import Metrics

ROUTE = "/v1/agents"


async def _answer_405(scope: Any, receive: Any, send: Any) -> None:
    scope["route"] = SimpleNamespace(path=ROUTE)  # as the router sets it on a partial match
    await send({"type": "http.response.start", "status": 405, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def _request(middleware: TelemetryMiddleware, method: str) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    await middleware({"type": "http", "method": method, "path": ROUTE}, receive, send)


def test_methods_the_api_never_serves_share_one_label() -> None:
    telemetry = Telemetry(Metrics())
    middleware = TelemetryMiddleware(_answer_405, telemetry)
    for method in ("PROPFIND", "MKCOL", "LOCK", "DELETE"):
        anyio.run(_request, middleware, method)
    methods = {
        sample.labels["method"]: sample.value
        for family in telemetry.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "stead_http_requests_total"
    }
    assert methods == {"_OTHER": 3, "DELETE": 1}
