"""Any OpenAI-compatible ``/v1/chat/completions`` server (vLLM, Ollama, ...).

The Messages-shaped request is translated to chat completions and the answer
back into content blocks, so the rest of the harness sees one format. The
answer is asked for whole (no ``stream``), so an observer sees nothing and
streams show no previews of these models' messages.
"""

from __future__ import annotations

import json

import httpx2

from stead.harness.model import AnswerObserver, ModelRequest, ModelResponse, UpstreamError
from stead.harness.providers.upstream import upstream_verify
from stead.jsonvalues import Json, JsonValueError, loads
from stead.telemetry import trace_headers

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}


def _text(blocks: list[Json]) -> str:
    return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")


def to_chat(request: ModelRequest) -> Json:
    messages: list[Json] = []
    if request.system:
        messages.append({"role": "system", "content": _text(request.system)})
    for message in request.messages:
        blocks = message["content"]
        if message["role"] == "assistant":
            calls = [
                {
                    "id": b["id"],
                    "type": "function",
                    "function": {"name": b["name"], "arguments": json.dumps(b.get("input", {}))},
                }
                for b in blocks
                if b["type"] == "tool_use"
            ]
            entry: Json = {"role": "assistant", "content": _text(blocks) or None}
            if calls:
                entry["tool_calls"] = calls
            messages.append(entry)
            continue
        for block in blocks:
            if block["type"] == "tool_result":
                content = _text(block.get("content") or [])
                messages.append(
                    {"role": "tool", "tool_call_id": block["tool_use_id"], "content": content}
                )
        text = _text(blocks)
        if text:
            messages.append({"role": "user", "content": text})
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description", ""),
                "parameters": t["input_schema"],
            },
        }
        for t in request.tools
    ]
    body: Json = {"model": request.model, "messages": messages, "max_tokens": request.max_tokens}
    if tools:
        body["tools"] = tools
    return body


def from_chat(answer: Json) -> ModelResponse:
    choice = answer["choices"][0]
    message = choice.get("message") or {}
    content: list[Json] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        try:
            # The same rules as a request body: a model's 1e400 or NaN must not
            # reach the log, where no read could render it.
            arguments = loads(call["function"].get("arguments") or "{}", root="arguments")
        except JsonValueError:
            arguments = {"_unparsed_arguments": call["function"].get("arguments")}
        content.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": arguments,
            }
        )
    usage = answer.get("usage") or {}
    finish = choice.get("finish_reason")
    return ModelResponse(
        content=content,
        stop_reason="tool_use" if finish == "tool_calls" else "end_turn",
        usage={
            "input_tokens": int(usage.get("prompt_tokens", 0)),
            "output_tokens": int(usage.get("completion_tokens", 0)),
        },
    )


class OpenAICompatibleModel:
    def __init__(
        self, *, base_url: str, api_key: str | None, read_timeout: float, total_timeout: float
    ) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        timeout = httpx2.Timeout(total_timeout, read=read_timeout)
        self._client = httpx2.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            timeout=timeout,
            verify=upstream_verify(base_url),
        )

    async def complete(
        self, request: ModelRequest, *, op_key: str, observer: AnswerObserver | None = None
    ) -> ModelResponse:
        try:
            response = await self._client.post(
                "/chat/completions",
                json=to_chat(request),
                headers=trace_headers({"idempotency-key": op_key}),
            )
        except httpx2.TimeoutException:
            raise UpstreamError("upstream timed out", retryable=True) from None
        except httpx2.TransportError as exc:
            raise UpstreamError(f"upstream connection failed: {exc}", retryable=True) from None
        if response.status_code >= 400:
            raise UpstreamError(
                f"upstream answered {response.status_code}: {response.text[:500]}",
                status=response.status_code,
                retryable=response.status_code in RETRYABLE_STATUS or response.status_code >= 500,
                error_type="model_rate_limited_error"
                if response.status_code == 429
                else "model_request_failed_error",
            )
        try:
            return from_chat(response.json())
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise UpstreamError(
                f"upstream sent an unreadable answer: {exc}", retryable=False
            ) from None

    async def aclose(self) -> None:
        await self._client.aclose()
