"""Text blocks in sent events (``schemas.events.check_events``): what the
Messages API would refuse in every later request of the session is refused here."""

from __future__ import annotations

import pytest

from stead.schemas import RequestError
from stead.schemas.events import check_events


def _text(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


def test_a_message_needs_some_non_whitespace_text_in_every_text_block() -> None:
    check_events([{"type": "user.message", "content": _text("hi")}], "events")
    for blank in ("", " \n\t"):
        with pytest.raises(RequestError, match=r"events\.0\.content\.0\.text"):
            check_events([{"type": "user.message", "content": _text(blank)}], "events")


def test_a_tool_result_may_be_whitespace_but_not_empty() -> None:
    result = {"type": "user.custom_tool_result", "custom_tool_use_id": "sevt_x"}
    check_events([{**result, "content": _text("\n")}], "events")  # a command's blank output
    with pytest.raises(RequestError, match="must hold some text"):
        check_events([{**result, "content": _text("")}], "events")
