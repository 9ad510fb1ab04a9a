"""Which tool results and confirmations an accepted request logs
(``store._answers.first_answers``, ``first_confirmations``): a tool use is
answered once, and confirmed once."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from stead.events import EventType
from stead.store import Conflict, EventRecord, NewEvent
from stead.store._answers import first_answers, first_confirmations

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


def test_a_tool_use_is_confirmed_once() -> None:
    """The same answer again stands for the logged one; another answer, or one
    for a call that has its result (closed by an interrupt), is refused."""
    allow = NewEvent(
        "sevt_a", EventType.USER_TOOL_CONFIRMATION, {"tool_use_id": "sevt_use", "result": "allow"}
    )
    deny = replace(allow, id="sevt_d", body={"tool_use_id": "sevt_use", "result": "deny"})
    logged = EventRecord("sesn_1", "sevt_logged", allow.type, allow.body, NOW, seq=5)
    assert first_confirmations([allow, allow], lambda _: None) == ([allow], [])
    assert first_confirmations([allow], lambda _: logged) == ([], [logged])
    with pytest.raises(Conflict, match="already confirmed"):
        first_confirmations([allow, deny], lambda _: None)
    with pytest.raises(Conflict, match="already confirmed"):
        first_confirmations([deny], lambda _: logged)
    closed = replace(logged, type=EventType.AGENT_TOOL_RESULT, body={"tool_use_id": "sevt_use"})
    with pytest.raises(Conflict, match="already has a result"):
        first_confirmations([allow], lambda _: closed)
