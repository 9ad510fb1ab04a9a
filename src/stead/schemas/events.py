"""Session events sent by clients: validation and the rules between events."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

from stead.events import EventType
from stead.jsonvalues import Json
from stead.media_types import IMAGE_MAX_PIXELS, image_size
from stead.schemas.validation import RequestError, StrictParams

SEND = StrictParams("event_send")

USER_EVENT_TYPES = (
    EventType.USER_MESSAGE,
    EventType.USER_INTERRUPT,
    EventType.USER_TOOL_CONFIRMATION,
    EventType.USER_CUSTOM_TOOL_RESULT,
    EventType.USER_TOOL_RESULT,
    EventType.USER_DEFINE_OUTCOME,
    "system.message",
)
INITIAL_EVENT_TYPES = (EventType.USER_MESSAGE, EventType.USER_DEFINE_OUTCOME)
SYSTEM_FOLLOWS = (
    EventType.USER_MESSAGE,
    EventType.USER_TOOL_RESULT,
    EventType.USER_CUSTOM_TOOL_RESULT,
)
DELTA_TYPES = (EventType.AGENT_MESSAGE, EventType.AGENT_THINKING)
MAX_DELTA_TYPES = 100
MAX_RUBRIC = 262_144

REFERENCES = {
    EventType.USER_TOOL_CONFIRMATION: (
        "tool_use_id",
        (EventType.AGENT_TOOL_USE, EventType.AGENT_MCP_TOOL_USE),
    ),
    EventType.USER_CUSTOM_TOOL_RESULT: ("custom_tool_use_id", (EventType.AGENT_CUSTOM_TOOL_USE,)),
    EventType.USER_TOOL_RESULT: ("tool_use_id", (EventType.AGENT_TOOL_USE,)),
}
"""Events that answer an earlier agent event: the field naming it and the types it may be."""


def parse_send(body: Any, max_events: int) -> list[Json]:
    events = list(SEND.validate(body)["events"])
    if not events:
        raise RequestError("events: send at least one event")
    if len(events) > max_events:
        raise RequestError(f"events: at most {max_events} events per request, got {len(events)}")
    check_events(events, "events")
    return events


def check_events(events: list[Json], field: str) -> None:
    for i, event in enumerate(events):
        where = f"{field}.{i}"
        kind = event["type"]
        if kind == EventType.USER_MESSAGE:
            _check_message_content(event["content"], f"{where}.content")
        # A message's text must hold some non-whitespace text; a tool result's
        # must not be empty (its whitespace output stays as it is).
        blank = kind in (EventType.USER_MESSAGE, "system.message")
        _check_text_blocks(event.get("content"), f"{where}.content", blank=blank)
        _check_sources(event.get("content"), f"{where}.content")
        if kind == "system.message":
            _check_system_message(events, i, where)
        denied = event.get("result") == "deny"
        if (
            kind == EventType.USER_TOOL_CONFIRMATION
            and event.get("deny_message") is not None
            and not denied
        ):
            raise RequestError(f"{where}.deny_message: only allowed with result 'deny'")
        if kind == EventType.USER_DEFINE_OUTCOME:
            _check_outcome(event, where)


def _check_message_content(content: list[Json], where: str) -> None:
    """A message holds a block the model is shown: a ``redacted`` block is a
    placeholder, left out of the model's messages, so a message of nothing else
    would reach the model as no message at all (the Messages API refuses a first
    one; after an answer the model would be asked to go on with its own)."""
    if not content:
        raise RequestError(f"{where}: must hold at least one block")
    if all(block.get("type") == "redacted" for block in content):
        raise RequestError(
            f"{where}: holds only redacted blocks, which the model is not shown; "
            "send a text, image or document block with them"
        )


def _check_text_blocks(content: Any, where: str, *, blank: bool) -> None:
    """No text block is empty (nor, with ``blank``, only whitespace): the
    Messages API refuses such a block, and the event would be in every later
    request of the session."""
    if not isinstance(content, list):
        return
    for j, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "text":
            text = block.get("text")
            if isinstance(text, str) and not (text.strip() if blank else text):
                wanted = "some non-whitespace text" if blank else "some text"
                raise RequestError(f"{where}.{j}.text: must hold {wanted}")


def _check_sources(content: Any, where: str) -> None:
    """No image or document names a file by ``file_id``, and no image sent as
    base64 is larger than the model takes: the model API would refuse the
    request, and every later one of the session, which carries the event too
    (stead sends a file source on as it came, where no such file is, nor the
    Files API's beta)."""
    if not isinstance(content, list):
        return
    for j, block in enumerate(content):
        source = block.get("source") if isinstance(block, dict) else None
        if not isinstance(source, dict):
            continue
        if source.get("type") == "file":
            raise RequestError(
                f"{where}.{j}.source.type: stead does not pass a file source on to the "
                "model; send the content as base64 (or a url)"
            )
        if block.get("type") == "image" and source.get("type") == "base64":
            _check_image_size(source.get("data"), f"{where}.{j}.source.data")


def _check_image_size(data: Any, where: str) -> None:
    if not isinstance(data, str):
        return
    try:
        size = image_size(base64.b64decode(data))
    except (binascii.Error, ValueError):
        return  # the model API names what is wrong with it
    if size is not None and max(size) > IMAGE_MAX_PIXELS:
        raise RequestError(
            f"{where}: the image is {size[0]}x{size[1]} pixels; the model takes at most "
            f"{IMAGE_MAX_PIXELS} pixels on a side: send a scaled-down copy"
        )


def _check_system_message(events: list[Json], i: int, where: str) -> None:
    if not 1 <= len(events[i]["content"]) <= 1000:
        raise RequestError(f"{where}.content: must hold 1 to 1000 text blocks")
    if i != len(events) - 1:
        raise RequestError(f"{where}: a system.message must be the last event of the request")
    if i == 0 or events[i - 1]["type"] not in SYSTEM_FOLLOWS:
        raise RequestError(
            f"{where}: a system.message must follow a user.message, user.tool_result "
            "or user.custom_tool_result in the same request"
        )


def _check_outcome(event: Json, where: str) -> None:
    iterations = event.get("max_iterations")
    if iterations is not None and not 1 <= iterations <= 20:
        raise RequestError(f"{where}.max_iterations: must be between 1 and 20")
    rubric = event["rubric"]
    if rubric["type"] == "text" and len(rubric["content"]) > MAX_RUBRIC:
        raise RequestError(f"{where}.rubric.content: at most {MAX_RUBRIC} characters")
    # Accepting an outcome that nothing grades would let a client wait for an
    # evaluation that never comes.
    raise RequestError(f"{where}.type: user.define_outcome is not supported: stead has no grader")


def check_initial_events(events: list[Json]) -> None:
    for i, event in enumerate(events):
        if event["type"] not in INITIAL_EVENT_TYPES:
            raise RequestError(
                f"initial_events.{i}.type: only user.message and user.define_outcome are allowed"
            )
    check_events(events, "initial_events")


def check_references(
    events: list[Json], lookup: Callable[[str], tuple[str, Json] | None], field: str = "events"
) -> None:
    """Checks that answers name an agent event of the right type in this session.

    ``lookup(event_id)`` returns (type, body) of a logged event or None.
    """
    for i, event in enumerate(events):
        rule = REFERENCES.get(event["type"])
        if rule is None:
            continue
        key, allowed = rule
        found = lookup(event[key])
        if found is None or found[0] not in allowed:
            # The id as given, cut short: a client's megabyte is not sent back whole.
            shown = repr(event[key][:80]) + ("..." if len(event[key]) > 80 else "")
            raise RequestError(
                f"{field}.{i}.{key}: no {' or '.join(allowed)} event {shown} in this session"
            )
        asked = found[1].get("evaluated_permission") == "ask"
        if event["type"] == EventType.USER_TOOL_CONFIRMATION and not asked:
            # Logged, it would start a turn with nothing to do.
            raise RequestError(
                f"{field}.{i}.{key}: {event[key]} needs no confirmation (its permission "
                "policy is not always_ask)"
            )


def parse_delta_types(values: list[str]) -> list[str]:
    if len(values) > MAX_DELTA_TYPES:
        raise RequestError(f"event_deltas[]: at most {MAX_DELTA_TYPES} values")
    for value in values:
        if value not in DELTA_TYPES:
            raise RequestError(
                f"event_deltas[]: {value[:80]!r} is not one of {', '.join(DELTA_TYPES)}"
            )
    return values
