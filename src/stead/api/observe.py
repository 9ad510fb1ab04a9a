"""Pure ASGI middleware: a span, the request metrics and an access log line
per HTTP request, and a line per terminal WebSocket.

Labels and log lines name the route template (``/v1/sessions/{session_id}``),
never the path with its query: a terminal URL's query carries the command it
runs, and no query string, header or body is logged.
"""

from __future__ import annotations

import logging
import time

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stead.telemetry import FIELDS, Telemetry

log = logging.getLogger("stead.access")
UNMATCHED = "unmatched"
"""The route label of a request no route matched (a 404 for any path)."""
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""The methods labelled as themselves; the server's parser takes some thirty
more (PROPFIND, MKCOL ...), each answered 405 on every route: labelled as such,
anyone could add a series per method and route."""
OTHER_METHOD = "_OTHER"
"""The method label of any other method (OpenTelemetry's name for it)."""


TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})


def method_label(method: str) -> str:
    return method if method in METHODS else OTHER_METHOD


def route_of(scope: Scope) -> str:
    """The template of the route the router matched (it sets ``scope["route"]``)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


def caller_context(scope: Scope) -> Context | None:
    """The caller's trace, when its request carries a W3C ``traceparent``: the
    request's span is then a child of the caller's. A turn the request starts
    still begins a trace of its own (``stead.telemetry.detached``)."""
    carrier = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope.get("headers", ())
        if name in TRACE_HEADERS
    }
    return TraceContextTextMapPropagator().extract(carrier) if carrier else None


class TelemetryMiddleware:
    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        method = scope["method"]
        status = 500  # what the server answers when the app raises before answering
        tracer = self.telemetry.tracing.tracer

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        label = method_label(method)
        # OpenTelemetry's names: a span of an _OTHER method is named HTTP.
        named = "HTTP" if label == OTHER_METHOD else label
        caller = caller_context(scope)
        with tracer.start_as_current_span(named, caller, kind=SpanKind.SERVER) as span:
            try:
                await self.app(scope, receive, send_status)
            finally:
                route = route_of(scope)
                span.update_name(f"{named} {route}")
                span.set_attribute("http.request.method", label)
                if label != method:
                    span.set_attribute("http.request.method_original", method)
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR))
                self._account(scope, method, route, status, time.monotonic() - started)

    def _account(self, scope: Scope, method: str, route: str, status: int, took: float) -> None:
        metrics = self.telemetry.metrics
        label = method_label(method)
        metrics.requests.labels(label, route, str(status)).inc()
        metrics.request_seconds.labels(label, route).observe(took)
        fields = {
            "method": method,
            "route": route,
            "status": status,
            "duration_ms": round(took * 1000, 3),
            "request_id": scope.get("state", {}).get("request_id"),
        }
        log.info("%s %s %d", method, route, status, extra={FIELDS: fields})

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()
        closed: int | None = None

        async def send_close(message: Message) -> None:
            nonlocal closed
            if message["type"] == "websocket.close":
                closed = message.get("code", 1000)
            await send(message)

        try:
            await self.app(scope, receive, send_close)
        finally:
            route = route_of(scope)
            self.telemetry.metrics.websockets.labels(route).inc()
            fields = {
                "method": "WEBSOCKET",
                "route": route,
                "close_code": closed,
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
            }
            log.info("WEBSOCKET %s closed", route, extra={FIELDS: fields})
