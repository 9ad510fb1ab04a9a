"""What any provider's answer must be before the loop logs it or runs its calls.

An answer is logged as the session's events, rendered into every later request
and, for a tool call, run: a block of the wrong shape would break each of those
later, and a count of the wrong kind would break the usage ledger. So both
providers hand their answer through ``checked`` and an answer that fails it is
an ``UpstreamError`` like any other unreadable answer.
"""

from __future__ import annotations

from stead.harness.model import CALL_BLOCKS, ModelResponse
from stead.jsonvalues import Json

MAX_COUNT = 2**53
"""Above any real token count; a bigger one would overflow the ledger's integers."""
TEXT_FIELDS = {"text": "text", "thinking": "thinking", "redacted_thinking": "data"}
"""Blocks that carry text, and the field that holds it."""


class MalformedAnswer(ValueError):
    """An answer whose blocks or usage are not what the Messages API sends."""


def checked(response: ModelResponse) -> ModelResponse:
    """``response``, its blocks checked and its usage made of counts."""
    for index, block in enumerate(response.content):
        _check_block(index, block)
    usage = {name: token_count(name, value) for name, value in response.usage.items()}
    return ModelResponse(
        content=response.content,
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
