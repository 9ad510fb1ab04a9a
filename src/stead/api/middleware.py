"""Pure ASGI middleware: a request id on every response (SSE included), and
on every log line written while the request is served."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stead.ids import new_id
from stead.telemetry import serving_request


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        rid = state.setdefault("request_id", new_id("request"))
        header = (b"request-id", rid.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == b"request-id" for name, _ in headers):
                    headers.append(header)
                message["headers"] = headers
            await send(message)

        with serving_request(rid):
            await self.app(scope, receive, send_with_id)
