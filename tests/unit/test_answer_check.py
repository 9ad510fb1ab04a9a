"""What a provider's answer must be before the loop logs it or runs its calls
(``answer_check.checked``), and the OpenAI-compatible answers read into it."""

from __future__ import annotations

from typing import Any

import pytest

from stead.harness.model import ModelResponse
from stead.harness.providers.answer_check import MAX_COUNT, MalformedAnswer, checked
from stead.harness.providers.openai import from_chat

Json = dict[str, Any]
CALL = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}


def answer(*content: Json, **usage: object) -> ModelResponse:
    return ModelResponse(content=list(content), stop_reason="end_turn", usage=dict(usage))


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ({"type": "text", "text": {"an": "object"}}, "text is not a string"),
        ({"type": "thinking", "thinking": None}, "thinking is not a string"),
        ({**CALL, "name": None}, "no string name"),
        ({**CALL, "name": ["bash"]}, "no string name"),
        ({**CALL, "id": ""}, "no string id"),
        ({"text": "no type"}, "has no type"),
        ({**CALL, "input": ["ls"]}, "input is not an object"),
        ({**CALL, "type": "server_tool_use", "input": "ls"}, "input is not an object"),
    ],
)
def test_a_block_of_the_wrong_shape_is_refused(block: Json, says: str) -> None:
    with pytest.raises(MalformedAnswer, match=says):
        checked(answer(block))


@pytest.mark.parametrize("count", [-1, MAX_COUNT + 1, 1e300, "abc", True, 2.5, float("nan")])
def test_a_usage_that_is_no_token_count_is_refused(count: object) -> None:
    with pytest.raises(MalformedAnswer, match=r"usage\.output_tokens"):
        checked(answer(CALL, input_tokens=3, output_tokens=count))


def test_a_whole_answer_passes_a_null_count_is_none_and_a_whole_float_its_int() -> None:
    passed = checked(
        answer({"type": "text", "text": "hi"}, CALL, input_tokens=3.0, output_tokens=None)
    )
    assert passed.content[1] == CALL and passed.usage == {"input_tokens": 3, "output_tokens": 0}


def chat(message: Json, finish: str = "stop", **extra: Any) -> Json:
    return {"choices": [{"message": message, "finish_reason": finish}], **extra}


def test_chat_content_in_text_parts_is_joined() -> None:
    parts = [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}]
    assert from_chat(chat({"content": parts})).content == [{"type": "text", "text": "ab"}]


def test_a_chat_refusal_is_the_answer_s_text_and_its_stop_reason() -> None:
    refused = from_chat(chat({"content": None, "refusal": "I can't help with that."}))
    assert refused.content == [{"type": "text", "text": "I can't help with that."}]
    assert refused.stop_reason == "refusal"


def test_chat_usage_of_nulls_counts_nothing() -> None:
    usage = {"prompt_tokens": None, "completion_tokens": 4}
    assert from_chat(chat({"content": "hi"}, usage=usage)).usage == {
        "input_tokens": 0,
        "output_tokens": 4,
    }


@pytest.mark.parametrize(
    "bad",
    [
        {"choices": None},
        {"choices": [None]},
        chat("a string"),  # type: ignore[arg-type]
        chat({"content": 7}),
        chat({"content": [{"type": "text", "text": 7}]}),
        chat({"content": None, "tool_calls": "bash"}),
        chat({"content": None, "tool_calls": [{"function": "bash"}]}),
        chat({"content": "hi"}, usage=[1, 2]),
        chat({"content": "hi"}, usage={"prompt_tokens": -3}),
    ],
)
def test_a_chat_answer_of_the_wrong_shape_is_malformed(bad: Json) -> None:
    with pytest.raises(MalformedAnswer):
        checked(from_chat(bad))


def test_surrogates_in_an_answer_are_made_text_the_store_takes() -> None:
    # A pair split over two deltas comes joined as its two halves; one alone is U+FFFD.
    text = {"type": "text", "text": "a\ud83d" + "\ude00 b\ud800"}
    call = {**CALL, "input": {"command": "echo \udfff"}}
    passed = checked(answer(text, call))
    assert passed.content == [
        {"type": "text", "text": "a\U0001f600 b\ufffd"},
        {**CALL, "input": {"command": "echo \ufffd"}},
    ]


@pytest.mark.parametrize("number", [float("nan"), float("inf"), -float("inf")])
def test_a_number_no_read_could_render_is_refused(number: float) -> None:
    with pytest.raises(
        MalformedAnswer, match=r"content\.0\.input\.timeout: the number is not finite"
    ):
        checked(answer({**CALL, "input": {"command": "ls", "timeout": number}}))


@pytest.mark.parametrize("given", [{}, {"id": ""}, {"id": None}])
def test_a_chat_tool_call_without_an_id_is_given_one(given: Json) -> None:
    calls = [{**given, "function": {"name": "bash", "arguments": '{"command": "ls"}'}}] * 2
    passed = checked(from_chat(chat({"content": None, "tool_calls": calls}, "tool_calls")))
    assert [block["id"] for block in passed.content] == ["call_0", "call_1"]
