"""The Anthropic Messages API through the official SDK (streaming underneath).

The request goes through the SDK's client (``post`` to ``/v1/messages``, its
headers, timeouts and stream decoder) as JSON bytes encoded here, and the answer
streams into ``AnswerBuilder``: the SDK's ``messages.stream`` helper would rebuild a typed
snapshot of the message on every event, which cost about 0.5 ms a call. The
SDK's OpenTelemetry spans are off unless the process has a tracer provider
(without one they go nowhere, yet building each one's attributes costs about
0.2 ms a call).

The SDK's own retries are off: the runtime owns retry policy, so it can report
each retry as ``session.status_rescheduled``. SDK errors become ``UpstreamError``
here and nowhere else.

The SDK is imported on the first model call, not at start: importing it costs
about a second and 38 MB, which a server that has not yet run a turn (or runs
only OpenAI-compatible models) need not pay. The import runs in a worker thread
so the event loop keeps serving meanwhile.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import httpx2

from stead.harness.model import AnswerObserver, ModelRequest, ModelResponse, UpstreamError
from stead.harness.providers.anthropic_answer import AnswerBuilder
from stead.telemetry import trace_headers

if TYPE_CHECKING:
    import anthropic

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
ERROR_TYPES = {429: "model_rate_limited_error", 529: "model_overloaded_error"}


def _retry_after(response: Any) -> float | None:
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


RETRYABLE_KINDS = {"overloaded_error": 529, "rate_limit_error": 429, "api_error": 500}
"""Error types in an error body; an ``event: error`` mid-stream arrives with status 200."""


def _kind(exc: anthropic.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and isinstance(error.get("type"), str):
            return str(error["type"])
    return None


def map_error(exc: Exception) -> UpstreamError:
    import anthropic  # loaded already: only an SDK call raises what is mapped here

    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status < 400:
            status = RETRYABLE_KINDS.get(_kind(exc) or "", 500)
        return UpstreamError(
            f"upstream answered {status}: {exc.message}",
            status=status,
            retryable=status in RETRYABLE_STATUS or status >= 500,
            retry_after=_retry_after(exc.response),
            error_type=ERROR_TYPES.get(status, "model_request_failed_error"),
        )
    if isinstance(exc, anthropic.APITimeoutError):
        return UpstreamError("upstream timed out", retryable=True)
    if isinstance(exc, anthropic.APIConnectionError):
        return UpstreamError(f"upstream connection failed: {exc}", retryable=True)
    return UpstreamError(f"upstream failed: {exc}", retryable=False)


class AnthropicModel:
    def __init__(
        self, *, base_url: str | None, api_key: str, read_timeout: float, total_timeout: float
    ) -> None:
        self._base_url = base_url
        self._api_key = api_key
        self._read_timeout = read_timeout
        self._total_timeout = total_timeout
        self._client: anthropic.AsyncAnthropic | None = None
        self._building = anyio.Lock()

    async def client(self) -> anthropic.AsyncAnthropic:
        """The SDK client, built (and the SDK imported) once, by the first caller."""
        if self._client is None:
            async with self._building:
                if self._client is None:
                    self._client = await anyio.to_thread.run_sync(self._build)
        return self._client

    def _build(self) -> anthropic.AsyncAnthropic:
        import anthropic
        from opentelemetry import trace

        traced = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        return anthropic.AsyncAnthropic(
            base_url=self._base_url,
            api_key=self._api_key,
            max_retries=0,
            timeout=self._read_timeout,
            # None: the SDK's default (its ANTHROPIC_OPEN_TELEMETRY* variables).
            open_telemetry=None if traced else False,
        )

    async def complete(
        self, request: ModelRequest, *, op_key: str, observer: AnswerObserver | None = None
    ) -> ModelResponse:
        # Sent as the JSON bytes it is: ``messages.create`` would deep-copy the
        # whole body (the session's context) twice before encoding it.
        body = json.dumps(
            {**request.as_params(), "stream": True}, separators=(",", ":"), ensure_ascii=False
        ).encode()
        headers = trace_headers({"idempotency-key": op_key, "content-type": "application/json"})
        client = await self.client()
        import anthropic  # loaded by ``client()``
        from anthropic.types import Message, RawMessageStreamEvent

        answer = AnswerBuilder(observer)
        try:
            with anyio.fail_after(self._total_timeout):
                stream = await client.post(
                    "/v1/messages",
                    content=body,
                    cast_to=Message,
                    options={"headers": headers},
                    stream=True,
                    stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
                )
                async with stream:
                    async for event in stream:
                        answer.add(event)
        except TimeoutError:
            raise UpstreamError(
                f"no complete answer within {self._total_timeout:g}s", retryable=True
            ) from None
        except anthropic.APIError as exc:
            raise map_error(exc) from None
        except httpx2.TimeoutException:
            # Mid-stream, the SDK lets the transport's own errors through unwrapped.
            raise UpstreamError("upstream stopped sending (read timeout)", retryable=True) from None
        except httpx2.TransportError as exc:
            raise UpstreamError(f"upstream connection broke: {exc!r}", retryable=True) from None
        return ModelResponse(
            content=answer.content(), stop_reason=answer.stop_reason, usage=answer.usage()
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.close()
