"""What any provider's answer must be before the loop logs it or runs its calls.

An answer is logged as the session's events, rendered into every later request
and, for a tool call, run: a block of the wrong shape would break each of those
later, and a count of the wrong kind would break the usage ledger. So both
providers hand their answer through ``checked`` and an answer that fails it is
an ``UpstreamError`` like any other unreadable answer.
"""

from __future__ import annotations

from typing import Any

from stead.harness.model import CALL_BLOCKS, ModelResponse
from stead.jsonvalues import Json, problem, repaired

MAX_COUNT = 2**53
"""Above any real token count; a bigger one would overflow the ledger's integers."""
TEXT_FIELDS = {"text": "text", "thinking": "thinking", "redacted_thinking": "data"}
"""Blocks that carry text, and the field that holds it."""


class MalformedAnswer(ValueError):
    """An answer whose blocks or usage are not what the Messages API sends."""


def checked(response: ModelResponse) -> ModelResponse:
    """``response``, its blocks checked and its usage made of counts; its
    strings' UTF-16 surrogates made text (``_paired``)."""
    content = response.content
    for index, block in enumerate(content):
        _check_block(index, block)
    if problem(content, root="content") is not None:
        content = _paired(content)
        found = problem(content, root="content")
        if found is not None:  # a number no read could render (NaN, 1e400), or too deep
            raise MalformedAnswer(f"{found[0]}: {found[1]}")
    usage = {name: token_count(name, value) for name, value in response.usage.items()}
    return ModelResponse(
        content=content,
        stop_reason=response.stop_reason,
        usage=usage,
        stop_details=response.stop_details,
    )


def _check_block(index: int, block: Json) -> None:
    kind = block.get("type")
    if not isinstance(kind, str):
        raise MalformedAnswer(f"content block {index} has no type")
    field = TEXT_FIELDS.get(kind)
    if field is not None and not isinstance(block.get(field), str):
        raise MalformedAnswer(f"content block {index} ({kind}): {field} is not a string")
    if kind in CALL_BLOCKS:
        for name in ("id", "name"):
            value = block.get(name)
            if not isinstance(value, str) or not value:
                raise MalformedAnswer(f"content block {index} ({kind}): no string {name}")
        # The Messages API's input is an object: logged as another value, the call's
        # event broke the SDK's reading of the session's events, and the call, sent
        # back in every later request, had the API refuse each of them.
        if not isinstance(block.get("input", {}), dict):
            raise MalformedAnswer(f"content block {index} ({kind}): input is not an object")


def token_count(name: str, value: object) -> int:
    """A token count: an integer from 0 to ``MAX_COUNT``; null is 0 (some
    servers send it for what they do not count), and a whole float its
    integer (some send ``12.0``)."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise MalformedAnswer(f"usage.{name} is not a token count: {str(value)[:40]}")
    return value


def _paired(value: Any) -> Any:
    """``value`` with each string's surrogates made text, as the store takes it:
    a pair as its character (each half escaped in a delta of its own, the two
    joined only when the answer is), one unpaired as U+FFFD. Logged with one,
    an answer could not be written, and its turn failed and re-asked the model
    until its attempts ran out."""
    if isinstance(value, dict):
        return {_paired(key): _paired(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_paired(item) for item in value]
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return repaired(
                value.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
            )
        return value
    return value
