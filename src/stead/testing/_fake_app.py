"""The fake model's ASGI app: records each request, asks the script for a turn,
and delivers the dialect's reply through the request's faults.

Runs on the server thread's event loop. Every wait it makes (delays, stalls)
is bounded and ends early when the server stops or the client leaves. A
connection is cut by returning with the response unfinished, which uvicorn
answers by closing it (and logging one "returned without completing" line);
ASGI has no quieter way to drop a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeGuard

import anyio
from starlette.types import Receive, Scope, Send

from stead.testing._anthropic_wire import AnthropicDialect
from stead.testing._openai_wire import OpenAIDialect
from stead.testing._wire import Dialect, JsonReply, Reply, StreamReply, error_type_for, status_for
from stead.testing.faults import (
    Disconnect,
    Ending,
    FaultBook,
    HttpError,
    Plan,
    Stall,
    StreamError,
)
from stead.testing.received import ReceivedRequest, RequestLog
from stead.testing.scripts import Script, choose_turn

Woken = Literal["elapsed", "stopped", "left"]
_SSE_HEADERS = {"content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache"}
_DEFAULT_RETRY_AFTER = 1.0


class FakeModelApp:
    def __init__(
        self,
        script: Script,
        faults: FaultBook,
        log: RequestLog,
        chunk_chars: int,
        on_ready: Callable[[], None],
        context_window: int | None = None,
        max_request_bytes: int | None = None,
    ) -> None:
        self._script = script
        self._window = context_window
        self._most_bytes = max_request_bytes
        self._faults = faults
        self._log = log
        self._on_ready = on_ready
        self._anthropic = AnthropicDialect(chunk_chars)
        self._openai = OpenAIDialect(chunk_chars)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: anyio.Event | None = None
        self.ready = False
        self.script_errors: list[Exception] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._serve(scope, receive, send)

    def release_waits(self) -> None:
        """Ends every wait in progress (thread-safe): the server is stopping."""
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing waits
                self._loop.call_soon_threadsafe(self._stopping.set)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while (message := await receive())["type"] != "lifespan.shutdown":
            if message["type"] == "lifespan.startup":
                self._loop, self._stopping = asyncio.get_running_loop(), anyio.Event()
                self.ready = True
                await send({"type": "lifespan.startup.complete"})
                self._on_ready()
        await send({"type": "lifespan.shutdown.complete"})

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = await _read_body(receive)
        body = _json_object(raw)
        query = scope["query_string"].decode("latin-1")
        request = self._log.record(scope["method"], scope["path"], query, _headers(scope), body)
        plan = self._faults.plan_for(request)
        is_openai = request.path == "/v1/chat/completions"
        dialect: Dialect = self._openai if is_openai else self._anthropic
        assert self._stopping is not None  # set at startup, before any request
        delivery = _Delivery(send, receive, self._stopping, dialect, _request_id(request))
        # The reply is made only if a fault does not replace it, after any delay.
        reply = functools.partial(
            self._reply, request, dialect, bad_json=body is None, size=len(raw)
        )
        await delivery.run(reply, plan)

    def _reply(
        self, request: ReceivedRequest, dialect: Dialect, *, bad_json: bool, size: int
    ) -> Reply:
        route = (request.method, request.path)
        if self._most_bytes is not None and size > self._most_bytes:
            # Before anything reads the body, as the API's edge refuses it.
            message = "Request exceeds the maximum allowed number of bytes."
            body = dialect.error_body("request_too_large", message, _request_id(request))
            return JsonReply(body, 413)
        if route in {("POST", "/v1/chat/completions"), ("POST", "/v1/messages")}:
            return self._answer(dialect, request, bad_json)
        if route == ("POST", "/v1/messages/count_tokens") and not bad_json:
            return self._anthropic.count_tokens(request.body)
        message = f"no route {request.method} {request.path}"
        return JsonReply(dialect.error_body("not_found_error", message, _request_id(request)), 404)

    def _answer(self, dialect: Dialect, request: ReceivedRequest, bad_json: bool) -> Reply:
        rid = _request_id(request)
        problem = "the body is not a JSON object" if bad_json else dialect.invalid(request.body)
        if problem:
            return JsonReply(dialect.error_body("invalid_request_error", problem, rid), 400)
        if self._window is not None:
            counted = dialect.prompt_tokens(request.body)
            if counted > self._window:
                return dialect.too_long(counted, self._window, rid)
        try:
            turn = choose_turn(self._script, request.body)
        except Exception as exc:  # the test that wrote the script sees it in script_errors
            self.script_errors.append(exc)
            message = f"the fake model's script raised {exc!r}"
            return JsonReply(dialect.error_body("api_error", message, rid), 500)
        return dialect.answer(turn, request.body)


class _Delivery:
    """Sends one reply, applying a fault plan to it."""

    def __init__(
        self, send: Send, receive: Receive, stopping: anyio.Event, dialect: Dialect, rid: str
    ) -> None:
        self._send, self._receive, self._stopping = send, receive, stopping
        self._dialect, self._rid = dialect, rid

    async def run(self, make_reply: Callable[[], Reply], plan: Plan) -> None:
        if plan.delay:
            woken = await self._pause(plan.delay)
            if woken == "left":
                return
            if woken == "stopped":
                return await self._json(self._error(HttpError(503, "the fake model is stopping")))
        ending = plan.ending
        if isinstance(ending, HttpError):
            return await self._json(self._error(ending))
        reply = make_reply()
        if isinstance(ending, StreamError) and isinstance(reply, JsonReply):
            ending = HttpError(status_for(ending.error_type), ending.message, ending.error_type)
            await self._json(self._error(ending))
        elif isinstance(reply, JsonReply):
            await self._json(reply, ending)
        else:
            await self._stream(reply, ending, plan.chunk_delay)

    async def _json(self, reply: JsonReply, ending: Ending | None = None) -> None:
        data = reply.encoded()
        headers = {"content-type": "application/json", "content-length": str(len(data))}
        await self._start(reply.status, {**headers, **reply.headers})
        if isinstance(ending, Disconnect):
            # Cut inside the body: the client sees a short read, as on a dropped connection.
            return await self._body(data[: len(data) // 2], more=True)
        if isinstance(ending, Stall):
            await self._pause(ending.seconds)
            return  # unfinished: the connection is cut
        await self._body(data, more=False)

    async def _stream(self, reply: StreamReply, ending: Ending | None, chunk_delay: float) -> None:
        await self._start(200, _SSE_HEADERS)
        for index, chunk in enumerate(reply.chunks):
            if _fires_at(ending, index):
                return await self._end_stream(ending)
            if index and chunk_delay and await self._pause(chunk_delay) != "elapsed":
                return  # cut off: the server is stopping or nobody is listening
            await self._body(chunk, more=True)
        if ending is not None:  # placed after the last chunk
            return await self._end_stream(ending)
        await self._body(b"", more=False)

    async def _end_stream(self, ending: Ending) -> None:
        if isinstance(ending, StreamError):
            # The hosted API ends the stream cleanly right after an error event.
            chunk = self._dialect.error_chunk(ending.error_type, ending.message, self._rid)
            return await self._body(chunk, more=False)
        if isinstance(ending, Stall):
            await self._pause(ending.seconds)
        # Returning with the response unfinished makes uvicorn close the connection.

    def _error(self, error: HttpError) -> JsonReply:
        error_type = error.error_type or error_type_for(error.status)
        message = error.message or f"{error_type} (injected by the fake model)"
        headers = dict(error.headers)
        if error.status == 429 or error.retry_after is not None:
            headers["retry-after"] = _seconds(error.retry_after or _DEFAULT_RETRY_AFTER)
        body = self._dialect.error_body(error_type, message, self._rid)
        return JsonReply(body, error.status, headers)

    async def _start(self, status: int, headers: dict[str, str]) -> None:
        pairs = [(k.encode(), v.encode()) for k, v in {**headers, "request-id": self._rid}.items()]
        await self._send({"type": "http.response.start", "status": status, "headers": pairs})

    async def _body(self, data: bytes, *, more: bool) -> None:
        await self._send({"type": "http.response.body", "body": data, "more_body": more})

    async def _pause(self, seconds: float) -> Woken:
        """Waits ``seconds``, or less if the server stops or the client leaves."""
        woken: Woken = "elapsed"

        async def until(waiter: Callable[[], Awaitable[Any]], why: Woken) -> None:
            nonlocal woken
            await waiter()
            woken = why
            group.cancel_scope.cancel()

        with anyio.move_on_after(seconds):
            async with anyio.create_task_group() as group:
                group.start_soon(until, self._stopping.wait, "stopped")
                group.start_soon(until, self._client_left, "left")
        return woken

    async def _client_left(self) -> None:
        # The body is read already, so the next message is the disconnect.
        while (await self._receive())["type"] != "http.disconnect":
            pass


def _fires_at(ending: Ending | None, index: int) -> TypeGuard[StreamError | Disconnect | Stall]:
    return isinstance(ending, StreamError | Disconnect | Stall) and ending.after_chunks == index


async def _read_body(receive: Receive) -> bytes:
    parts = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(parts)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """The body's JSON object; {} for no body, None for anything else."""
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _request_id(request: ReceivedRequest) -> str:
    return f"req_fake_{request.ordinal:06d}"


def _seconds(value: float) -> str:
    return str(int(value)) if value == int(value) else str(value)
