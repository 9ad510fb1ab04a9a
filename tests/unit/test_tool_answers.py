"""Which tool results an accepted request logs (``store._work.first_answers``):
a tool use is answered once."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from stead.events import EventType
from stead.store import Conflict, EventRecord, NewEvent
from stead.store._work import first_answers

NOW = datetime(2026, 11, 29, tzinfo=UTC)


def test_a_custom_tool_result_answers_once() -> None:
    """Sent again, the logged result stands for it; for a call stead answered
    itself (an interrupted turn), a 409: the call has its answer already."""
    body = {"custom_tool_use_id": "sevt_use", "content": []}
    result = NewEvent("sevt_new", EventType.USER_CUSTOM_TOOL_RESULT, body)
    logged = EventRecord(
        "sesn_1", "sevt_logged", EventType.USER_CUSTOM_TOOL_RESULT,
        {"custom_tool_use_id": "sevt_use"}, NOW, seq=5,
    )  # fmt: skip
    assert first_answers([result, result], lambda _: None) == ([result], [])
    assert first_answers([result], lambda _: logged) == ([], [logged])
    closed = replace(logged, type=EventType.AGENT_TOOL_RESULT, body={"tool_use_id": "sevt_use"})
    with pytest.raises(Conflict, match="custom_tool_use_id"):
        first_answers([result], lambda _: closed)
