"""Any OpenAI-compatible ``/v1/chat/completions`` server (vLLM, Ollama, ...).

The Messages-shaped request is translated to chat completions and the answer
back into content blocks, so the rest of the harness sees one format. The
answer is asked for whole (no ``stream``), so an observer sees nothing and
streams show no previews of these models' messages.
"""

from __future__ import annotations

import json
import re

import anyio

from stead.harness.model import AnswerObserver, ModelRequest, ModelResponse, UpstreamError
from stead.harness.providers.answer_check import MalformedAnswer, checked, token_count
from stead.harness.providers.upstream import (
    Upstream,
    UpstreamBroken,
    UpstreamTimeout,
    detail,
    not_an_answer,
    retry_after,
)
from stead.jsonvalues import Json, JsonValueError, loads
from stead.telemetry import trace_headers

RETRYABLE_STATUS = {408, 409, 429, 500, 502, 503, 504}
MAX_ANSWER_BYTES = 64 * 1024 * 1024
"""An answer's bound (it comes whole, not streamed)."""
_STOP_REASONS = {"tool_calls": "tool_use", "content_filter": "refusal", "length": "max_tokens"}
"""Messages API stop reasons of the finish reasons that say more than "the turn ended";
"length" is max_tokens, so a tool call it cut is dropped (``ModelResponse.cut_call``)."""
TOO_LONG = re.compile(
    r"context_length_exceeded|maximum context length|exceeds the available context size"
)
"""How servers refuse a request longer than the model's window, in a 400's body:
OpenAI's and vLLM's ``code`` and ``This model's maximum context length is N
tokens``, llama.cpp's ``the request exceeds the available context size``."""
COUNTED = re.compile(r"resulted in (\d+) tokens|(\d+) in the messages|has (\d+) input tokens")
"""The request's tokens in such a refusal: OpenAI's ``your messages resulted
in N tokens``, vLLM's ``you requested M tokens (N in the messages, ...)`` and
``your request has N input tokens``."""


def _text(blocks: list[Json]) -> str:
    """The words of ``blocks``: text blocks run together as they always have; a
    search result (chat completions has no block for one) is a paragraph of its
    own, its title, source and text."""
    paragraphs: list[str] = []
    run = ""
    for block in blocks:
        if block.get("type") == "text":
            run += str(block.get("text", ""))
        elif block.get("type") == "search_result":
            found = "".join(b.get("text", "") for b in block.get("content") or [])
            paragraphs += [run, f"{block.get('title', '')} ({block.get('source', '')})\n{found}"]
            run = ""
    return "\n\n".join(p for p in [*paragraphs, run] if p)


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
        shown: list[Json] = []
        for block in blocks:
            if block["type"] == "tool_result":
                messages.append(_tool_message(block, shown))
        said = _user_content(blocks)
        if shown:
            said = [*shown, *(said if isinstance(said, list) else _as_parts(said))]
        if said:
            messages.append({"role": "user", "content": said})
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
    if request.effort is not None:  # the chat completions API knows low, medium and high
        body["reasoning_effort"] = REASONING_EFFORT.get(request.effort, "high")
    return body


def _tool_message(block: Json, shown: list[Json]) -> Json:
    """A tool result as a ``tool`` message, whose content can only be text: its
    images and documents go to ``shown``, content parts of the user message that
    follows the results, each after a line naming the call it came from."""
    content = block.get("content") or []
    attached = [b for b in content if b.get("type") in ("image", "document")]
    text = _text(content)
    if attached:
        call = block["tool_use_id"]
        shown.append({"type": "text", "text": f"The result of tool call {call} holds:"})
        shown.extend(_part(b) for b in attached)
        noted = f"({len(attached)} attachment(s) in the next user message)"
        text = f"{text}\n\n{noted}" if text else noted
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def _as_parts(text: str) -> list[Json]:
    return [{"type": "text", "text": text}] if text else []


def _part(block: Json) -> Json:
    if block["type"] == "image":
        return {"type": "image_url", "image_url": {"url": _source_url(block["source"])}}
    return _document_part(block)


def _user_content(blocks: list[Json]) -> str | list[Json]:
    """A user message's content: its text, or, when it holds an image or a
    document, content parts (``image_url``, ``file`` for a PDF, text for a text
    document), so the model is shown them, not just the words beside them."""
    if not any(b["type"] in ("image", "document") for b in blocks):
        return _text(blocks)
    parts: list[Json] = []
    for block in blocks:
        if block["type"] in ("image", "document"):
            parts.append(_part(block))
        elif said := _text([block]):
            parts.append({"type": "text", "text": said})
    return parts


def _source_url(source: Json) -> str:
    """A base64 source as a data URL, a url source as it is."""
    if source["type"] == "base64":
        return f"data:{source['media_type']};base64,{source['data']}"
    return str(source["url"])


def _document_part(block: Json) -> Json:
    """A document as a content part: a PDF (base64) as a ``file``; a text one as
    text; one given by URL (which a chat completions server does not fetch) as
    text naming it, with its title and context."""
    source = block["source"]
    title = block.get("title")
    if source["type"] == "base64":
        data_url = _source_url(source)
        return {
            "type": "file",
            "file": {"filename": title or "document.pdf", "file_data": data_url},
        }
    heading = [line for line in (title, block.get("context")) if line]
    body = source["data"] if source["type"] == "text" else f"(a document at {source['url']})"
    return {"type": "text", "text": "\n\n".join([*heading, body])}


REASONING_EFFORT = {"low": "low", "medium": "medium", "high": "high"}
"""An agent's effort as ``reasoning_effort``; above high (xhigh, max), high."""


def from_chat(answer: object) -> ModelResponse:
    """The Messages-shaped answer of a chat completion; ``MalformedAnswer`` for
    one that is not shaped as the chat completions API answers."""
    if not isinstance(answer, dict):
        raise MalformedAnswer("the answer is not an object")
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedAnswer("no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise MalformedAnswer("choices.0.message is not an object")
    content: list[Json] = []
    text = _answer_text(message.get("content"))
    refusal = message.get("refusal")
    refused = not text and isinstance(refusal, str) and bool(refusal)
    if text or refused:
        content.append({"type": "text", "text": text or refusal})
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise MalformedAnswer("choices.0.message.tool_calls is not a list")
    content += [_tool_use(call, index) for index, call in enumerate(calls)]
    usage = answer.get("usage") or {}
    if not isinstance(usage, dict):
        raise MalformedAnswer("usage is not an object")
    finish = choice.get("finish_reason")
    stop = "refusal" if refused else _STOP_REASONS.get(finish if isinstance(finish, str) else "")
    return ModelResponse(
        content=content,
        stop_reason=stop or "end_turn",
        usage={
            "input_tokens": token_count("prompt_tokens", usage.get("prompt_tokens")),
            "output_tokens": token_count("completion_tokens", usage.get("completion_tokens")),
        },
    )


def _answer_text(value: object) -> str:
    """A message's ``content``: a string, or (as some servers send it) a list
    of parts whose text parts are joined."""
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        parts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        if all(isinstance(p, str) for p in parts):
            return "".join(parts)  # type: ignore[arg-type]
    raise MalformedAnswer("choices.0.message.content is neither a string nor text parts")


def _tool_use(call: object, index: int) -> Json:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise MalformedAnswer("a tool call without its function")
    function = call["function"]
    # Some servers send no id, or "" (llama.cpp's, LM Studio, Gemini's endpoint):
    # the log names the call by its event, so the answer's place in it serves.
    given = call.get("id")
    call_id = given if isinstance(given, str) and given else f"call_{index}"
    raw = function.get("arguments") or "{}"
    arguments: object
    if isinstance(raw, dict):
        arguments = raw  # some servers send the object itself
    else:
        try:
            # The same rules as a request body: a model's 1e400 or NaN must not
            # reach the log, where no read could render it.
            arguments = loads(raw, root="arguments") if isinstance(raw, str) else None
        except JsonValueError:
            arguments = None
        if not isinstance(arguments, dict):  # the model's mistake ("ls", [...]): the tool says so
            arguments = {"_unparsed_arguments": str(raw)}
    return {
        "type": "tool_use",
        "id": call_id,
        "name": function.get("name"),
        "input": arguments,
    }


class OpenAICompatibleModel:
    def __init__(
        self, *, base_url: str, api_key: str | None, read_timeout: float, total_timeout: float
    ) -> None:
        self._headers = {"content-type": "application/json", "user-agent": "stead"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._upstream = Upstream(base_url, timeout=read_timeout)
        self._total_timeout = total_timeout

    async def complete(
        self, request: ModelRequest, *, op_key: str, observer: AnswerObserver | None = None
    ) -> ModelResponse:
        body = json.dumps(to_chat(request)).encode()
        headers = trace_headers({**self._headers, "idempotency-key": op_key})
        try:
            with anyio.fail_after(self._total_timeout):
                async with self._upstream.post("/chat/completions", body, headers) as response:
                    status, answered = response.status, response.headers
                    if status < 400 and status != 200:
                        raise not_an_answer(response)
                    text = await response.read(MAX_ANSWER_BYTES)
        except (TimeoutError, UpstreamTimeout) as exc:
            raise UpstreamError(f"upstream timed out{detail(exc)}", retryable=True) from None
        except UpstreamBroken as exc:
            raise UpstreamError(f"upstream connection failed: {exc}", retryable=True) from None
        if status >= 400:
            shown = text[:500].decode(errors="replace")
            too_long = status == 400 and TOO_LONG.search(shown) is not None
            counted = COUNTED.search(shown) if too_long else None
            raise UpstreamError(
                f"upstream answered {status}: {shown}",
                status=status,
                retryable=status in RETRYABLE_STATUS or status >= 500,
                retry_after=retry_after(answered),
                error_type="model_rate_limited_error"
                if status == 429
                else "model_request_failed_error",
                too_long=too_long,
                counted=int(next(filter(None, counted.groups()))) if counted else None,
                too_large=status == 413,  # a server's, or a proxy's before it
            )
        try:
            return checked(from_chat(json.loads(text)))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise UpstreamError(
                f"upstream sent an unreadable answer: {exc}", retryable=False
            ) from None

    async def aclose(self) -> None:
        await self._upstream.aclose()
