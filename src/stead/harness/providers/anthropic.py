"""The Anthropic Messages API over HTTP, streamed.

A request is the JSON bytes of its ``ModelRequest``, encoded once and POSTed to
``/v1/messages`` over ``upstream.Upstream`` (keep-alive HTTP/1.1 with the
trust and proxy variables the SDK's own transport honours, at a sixth of its
CPU); the answer is read with ``sse.SseDecoder``, each event's data decoded as
JSON and put together by ``AnswerBuilder``. The wire is the
SDK's: the same headers, the error body's ``error.type``, ``event: error``
mid-stream, ``ping`` and unknown events passed over; ``tests/unit/
test_anthropic_model.py`` holds the answer read here against the SDK's own
accumulator over the same bytes.

The SDK is not imported on this path: ``import anthropic`` loads some 3,300
modules (the types of every API it covers) and about 46 MB, for one POST
whose answer stead accumulates itself anyway. The SDK's retries were off
(the runtime owns retry policy, so it can report each retry as
``session.status_rescheduled``), and the model call's span is stead's own
(``Telemetry.model_call``).

Errors become ``UpstreamError`` here and nowhere else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import NoReturn

import anyio

from stead.harness.model import AnswerObserver, ModelRequest, ModelResponse, UpstreamError
from stead.harness.providers.answer_check import checked
from stead.harness.providers.anthropic_answer import STREAM_EVENTS, AnswerBuilder
from stead.harness.providers.sse import SseDecoder
from stead.harness.providers.upstream import (
    Response,
    Upstream,
    UpstreamBroken,
    UpstreamTimeout,
    detail,
    not_an_answer,
    retry_after,
)
from stead.telemetry import trace_headers

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2026-10-21"
"""The SDK's (``anthropic._constants``); the provider test holds them equal."""
RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}
ERROR_TYPES = {429: "model_rate_limited_error", 529: "model_overloaded_error"}
KIND_STATUS = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "api_error": 500,
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
}
"""The status of each error type of an error body: an ``event: error``
mid-stream arrives with status 200 and is placed by its type (one the API
adds later counts as a server error, tried again)."""
MAX_ERROR_BODY = 64 * 1024
"""How much of an error answer is read: its ``error.message`` is all that is used."""
MAX_EVENT_BYTES = 64 * 1024 * 1024
"""One streamed event's bound: a server tool's result arrives whole in its
``content_block_start`` and may pass a mebibyte."""
MESSAGES_PATH = "/v1/messages"
TOO_LONG = re.compile(r"prompt is too long(?:: (\d+) tokens)?")
"""How the API refuses a request longer than the model's window (a 400
``invalid_request_error``): ``prompt is too long: 208310 tokens > 200000 maximum``."""


def _error_of(body: object) -> tuple[str | None, str | None]:
    """(``error.type``, ``error.message``) of an error body, where it has them."""
    if not isinstance(body, dict):
        return None, None
    error = body.get("error", body)
    if not isinstance(error, dict):
        return None, None
    kind, message = error.get("type"), error.get("message")
    return (
        kind if isinstance(kind, str) else None,
        message if isinstance(message, str) else None,
    )


def status_error(
    status: int, body: object, headers: Mapping[str, str] | None = None
) -> UpstreamError:
    """The error for an answer with ``status`` and the decoded ``body``; a
    status under 400 is an ``event: error`` inside a stream, placed by its type."""
    kind, message = _error_of(body)
    if status < 400:
        status = KIND_STATUS.get(kind or "", 500)
    detail = message if message is not None else json.dumps(body)[:500]
    too_long = TOO_LONG.search(message or "") if status == 400 else None
    return UpstreamError(
        f"upstream answered {status}" + (f" ({kind})" if kind else "") + f": {detail}",
        status=status,
        retryable=status in RETRYABLE_STATUS or status >= 500,
        retry_after=retry_after(headers) if headers is not None else None,
        error_type=ERROR_TYPES.get(status, "model_request_failed_error"),
        too_long=too_long is not None,
        counted=int(too_long[1]) if too_long is not None and too_long[1] else None,
        # ``request_too_large``, over 32 MB: from the API's edge (Cloudflare),
        # before the API reads it, so its body may be no JSON at all.
        too_large=status == 413,
    )


async def _refused(response: Response) -> NoReturn:
    if response.status < 400:
        raise not_an_answer(response)
    body = await response.read(MAX_ERROR_BODY)
    try:
        decoded: object = json.loads(body)
    except ValueError:
        decoded = body[:500].decode(errors="replace")
    raise status_error(response.status, decoded, response.headers)


FAST_MODE_BETA = "fast-mode-2026-02-01"


class AnthropicModel:
    def __init__(
        self, *, base_url: str | None, api_key: str, read_timeout: float, total_timeout: float
    ) -> None:
        self._upstream = Upstream(base_url or DEFAULT_BASE_URL, timeout=read_timeout)
        self._headers = {
            "authorization": f"Bearer {api_key}",
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "user-agent": "stead",
        }
        self._total_timeout = total_timeout

    async def complete(
        self, request: ModelRequest, *, op_key: str, observer: AnswerObserver | None = None
    ) -> ModelResponse:
        # The request's canonical form, made once for its op key, with the flag
        # added last: a second dump of the whole conversation saved per step.
        body = (request.canonical_params[:-1] + ',"stream":true}').encode()
        headers = trace_headers({**self._headers, "idempotency-key": op_key})
        if request.speed is not None:
            # Some models take ``speed`` only under this beta; the others ignore it.
            headers["anthropic-beta"] = FAST_MODE_BETA
        answer = AnswerBuilder(observer)
        answered = False
        try:
            with anyio.fail_after(self._total_timeout):
                async with self._upstream.post(MESSAGES_PATH, body, headers) as response:
                    if response.status != 200:
                        await _refused(response)
                    answered = True
                    events = SseDecoder(MAX_EVENT_BYTES)
                    async for chunk in response.chunks():
                        for kind, data in events.feed(chunk):
                            if kind in STREAM_EVENTS:
                                answer.add(json.loads(data))
                            elif kind == "error":
                                raise status_error(200, json.loads(data))
            return checked(
                ModelResponse(
                    content=answer.content(),
                    stop_reason=answer.stop_reason,
                    usage=answer.usage(),
                    stop_details=answer.stop_details,
                )
            )
        except TimeoutError:
            raise UpstreamError(
                f"no complete answer within {self._total_timeout:g}s", retryable=True
            ) from None
        except UpstreamTimeout as exc:
            what = "stopped sending (read timeout)" if answered else "timed out"
            raise UpstreamError(f"upstream {what}{detail(exc)}", retryable=True) from None
        except UpstreamBroken as exc:
            what = "connection broke" if answered else "connection failed"
            raise UpstreamError(f"upstream {what}: {exc}", retryable=True) from None
        except ValueError as exc:  # the event's JSON, ``MalformedStream`` or ``MalformedAnswer``
            raise UpstreamError(
                f"upstream sent an unreadable stream: {exc}", retryable=True
            ) from None

    async def aclose(self) -> None:
        await self._upstream.aclose()
