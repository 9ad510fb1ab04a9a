"""Compaction in the harness: a pure function of the log, from the plan to the
context that follows the summary."""

from __future__ import annotations

import random
from base64 import b64encode
from typing import Any

import pytest

from stead.harness import (
    SUMMARY_INSTRUCTION,
    Compact,
    CompactionLimit,
    ContextLimits,
    ModelRequest,
    ModelResponse,
    UpstreamError,
    build_request,
    compacted_body,
    context_window,
    plan_compaction,
)
from stead.harness.windows import estimate_tokens
from tests.pdfs import pdf_base64

Json = dict[str, Any]
AGENT: Json = {"model": {"id": "claude-test"}, "system": "Be brief.", "tools": []}
LIMITS = ContextLimits(window=1000, threshold=0.8, keep_ratio=0.25, max_consecutive=3)
WORDS = "w" * 400  # 100 tokens by the estimate


class Log:
    """Builds a log with ``seq`` numbers, as the runtime hands it to the harness."""

    def __init__(self) -> None:
        self.events: list[Json] = []

    def add(self, kind: str, **body: Any) -> Json:
        seq = len(self.events) + 1
        found = {"type": kind, "id": f"e{seq}", **body, "_seq": seq}
        self.events.append(found)
        return found

    def user(self, text: str) -> Json:
        return self.add("user.message", content=[{"type": "text", "text": text}])

    def answer(self, text: str, *, tokens: int = 0) -> None:
        start = self.add("span.model_request_start")
        self.add("agent.message", content=[{"type": "text", "text": text}])
        usage = {"input_tokens": tokens, "output_tokens": 0}
        self.add("span.model_request_end", model_request_start_id=start["id"], model_usage=usage)

    def tool_round(self, output: str) -> None:
        start = self.add("span.model_request_start")
        use = self.add("agent.tool_use", name="bash", input={"command": "ls"})
        self.add("span.model_request_end", model_request_start_id=start["id"], model_usage={})
        content = [{"type": "text", "text": output}]
        self.add("agent.tool_result", tool_use_id=use["id"], content=content)

    def compacted(self, summary: str, kept_from: int) -> None:
        internal = {"summary": summary, "kept_from": kept_from}
        self.add("agent.thread_context_compacted", pre_compaction_tokens=900, _internal=internal)


def plan(events: list[Json], limits: ContextLimits = LIMITS) -> Compact | CompactionLimit | None:
    return plan_compaction(AGENT, events, {}, max_tokens=100, limits=limits)


def texts(request_messages: list[Json]) -> str:
    return " ".join(str(b.get("text", "")) for m in request_messages for b in m["content"])


def conversation(turns: int, log: Log | None = None, asked: str = "question") -> Log:
    """``turns`` questions and answers of 100 tokens each, then a last question."""
    log = log or Log()
    for number in range(turns):
        log.user(f"{asked} {number} {WORDS}")
        log.answer(f"answer to {asked} {number} {WORDS}")
    log.user("last question")
    return log


def test_a_context_that_fits_is_left_alone() -> None:
    assert plan(conversation(2).events) is None


def test_a_context_past_the_threshold_summarises_the_older_part() -> None:
    log = conversation(5)  # about 1,000 tokens: past 800
    planned = plan(log.events)
    assert isinstance(planned, Compact)
    messages = planned.request.messages
    assert messages[-1]["content"][-1] == {"type": "text", "text": SUMMARY_INSTRUCTION}
    assert "question 0" in texts(messages)
    # The kept part starts at a user message or a new answer, and fits 250 tokens.
    kept = next(e for e in log.events if e["_seq"] == planned.kept_from)
    assert kept["type"] in ("user.message", "span.model_request_start")
    assert "last question" not in texts(messages)
    assert planned.context_tokens > LIMITS.trigger
    # The same log plans the same request.
    assert plan(log.events) == planned


def test_after_the_compaction_the_request_is_the_summary_and_the_kept_events() -> None:
    log = conversation(5)
    planned = plan(log.events)
    assert isinstance(planned, Compact)
    log.compacted("SUMMARY OF THE START", planned.kept_from)
    request = build_request(AGENT, log.events, {}, max_tokens=100)
    first = request.messages[0]["content"][0]
    assert first["text"] == "<conversation-summary>\nSUMMARY OF THE START\n</conversation-summary>"
    # The summary is a cache breakpoint; with the system prompt and the last block: 3.
    assert first["cache_control"] == {"type": "ephemeral"}
    marks = [b for m in request.messages for b in m["content"] if "cache_control" in b]
    assert len(marks) == 2 and request.system and "cache_control" in request.system[0]
    assert "question 0" not in texts(request.messages)
    assert "last question" in texts(request.messages)
    assert plan(log.events) is None


def test_a_tool_use_and_its_result_are_never_split() -> None:
    log = Log()
    log.user(f"start {WORDS}")
    for _ in range(6):
        log.tool_round(WORDS)
    planned = plan(log.events)
    assert isinstance(planned, Compact)
    index = next(i for i, e in enumerate(log.events) if e["_seq"] == planned.kept_from)
    summarised, kept = log.events[:index], log.events[index:]
    used = {e["id"] for e in summarised if e["type"] == "agent.tool_use"}
    answered = {e["tool_use_id"] for e in kept if e["type"] == "agent.tool_result"}
    assert not used & answered
    assert kept[0]["type"] == "span.model_request_start"


def test_the_models_own_count_of_the_last_request_triggers_compaction() -> None:
    log = Log()
    log.user(f"first {WORDS}")
    log.answer("short", tokens=700)
    log.user("next")
    assert plan(log.events) is None  # 700 plus the little after it fits 800
    log.answer("short", tokens=850)
    log.user("next again")
    assert isinstance(plan(log.events), Compact)


def test_the_count_of_a_refused_turns_request_does_not_count() -> None:
    log = Log()
    log.user(f"first {WORDS}")
    log.answer("short", tokens=150)
    log.user(f"a refused request {'r' * 2400}")
    log.answer("no", tokens=850)  # the refused turn's own request, past the trigger
    log.add("session.status_idle", stop_reason={"type": "refusal"})
    log.user("next")
    assert plan(log.events) is None  # the refused turn is never sent again
    log.answer("short", tokens=870)  # counted again once the model answers
    log.user("next again")
    assert isinstance(plan(log.events), Compact)


def refused_as_too_long(log: Log, counted: int) -> None:
    """The model refused the log's request as longer than its window (``counted``
    tokens by its count, 0 when it did not say), as the runtime records it."""
    start = log.add("span.model_request_start")
    log.add(
        "span.model_request_end",
        model_request_start_id=start["id"],
        model_usage={},
        is_error=True,
        _internal={"too_long": counted},
    )
    error = {"type": "model_request_failed_error", "retry_status": {"type": "retrying"}}
    log.add("session.error", error=error)


@pytest.mark.parametrize("counted", [1800, 0])
def test_a_request_the_model_refused_as_too_long_is_compacted_whatever_the_estimate(
    counted: int,
) -> None:
    """By the estimate the request fits (some 500 tokens of 800); the model
    counted it past its window, and the next request is the same context."""
    log = conversation(2)
    assert plan(log.events) is None
    refused_as_too_long(log, counted)
    planned = plan(log.events)
    assert isinstance(planned, Compact)
    assert planned.context_tokens == max(counted, LIMITS.window + 1)
    # Counted at 1,800, the part kept is chosen as the model counts it: the
    # last question alone (more would be some 700 of a keep of 250).
    kept = [e for e in log.events if e["_seq"] >= planned.kept_from]
    assert [e["type"] for e in kept if "content" in e] == ["user.message"]
    log.compacted("summary", planned.kept_from)
    assert plan(log.events) is None  # the compaction's own size counts from here


def test_refusals_as_too_long_that_compacting_does_not_help_reach_the_limit() -> None:
    log = conversation(2)  # which fits by the estimate
    for count in range(3):
        refused_as_too_long(log, 1800)
        assert isinstance(plan(log.events), Compact)
        log.compacted(f"summary {count}", 1)  # keeping everything: it never helps
    refused_as_too_long(log, 1800)
    planned = plan(log.events)
    assert isinstance(planned, CompactionLimit)
    assert "3 times in a row" in planned.message


def test_a_recent_part_that_alone_does_not_fit_reaches_the_limit() -> None:
    log = Log()
    log.user("w" * 4000)  # 1,000 tokens in one message: nothing older to summarise
    planned = plan(log.events)
    assert isinstance(planned, CompactionLimit)
    assert "does not fit" in planned.message


def test_compactions_in_a_row_without_an_answer_reach_the_limit() -> None:
    log = conversation(5)
    for count in range(3):
        assert isinstance(plan(log.events), Compact)
        log.compacted(f"summary {count}", 1)  # keeping everything: it never helps
    planned = plan(log.events)
    assert isinstance(planned, CompactionLimit)
    assert "3 times in a row" in planned.message
    log.answer("an answer in between")
    log.user("more")
    assert isinstance(plan(log.events), Compact)


def test_a_turn_the_limit_ended_leaves_the_next_message_a_count_of_its_own() -> None:
    """The compactions of a turn that ended at the limit are not the next
    turn's: before, they counted until the model answered again, which it
    never did, so every message from then on ended at the limit at once."""
    log = conversation(5)
    for count in range(3):
        log.compacted(f"summary {count}", 1)
    assert isinstance(plan(log.events), CompactionLimit)
    log.add("session.status_idle", stop_reason={"type": "retries_exhausted"})
    log.user("next")
    assert isinstance(plan(log.events), Compact)
    waiting = conversation(5)  # a wait for input ends no turn: its compactions count
    for count in range(3):
        waiting.compacted(f"summary {count}", 1)
    waiting.add("session.status_idle", stop_reason={"type": "requires_action"})
    assert isinstance(plan(waiting.events), CompactionLimit)


def test_a_summary_too_long_for_the_window_is_cut_to_leave_room_for_the_rest() -> None:
    """A summary longer than the window left (a small window, a model that
    wrote at length) is recorded with its middle left out, so the request
    after it fits. Before, it was kept whole: every later request was too
    large, each compaction wrote another such summary, and after three in a
    row every message ended at the compaction limit."""
    log = conversation(4)
    planned = plan(log.events)
    assert isinstance(planned, Compact)
    answer = ModelResponse([{"type": "text", "text": "S" * 20_000 + " the end"}], "end_turn")
    body = compacted_body(answer, planned)
    summary = body["_internal"]["summary"]
    assert "characters left out" in summary and summary.endswith("the end")
    log.add("agent.thread_context_compacted", **body)
    assert plan(log.events) is None
    request = build_request(AGENT, log.events, {}, max_tokens=100)
    assert estimate_tokens(request.as_params()) <= LIMITS.trigger


def test_an_older_part_too_large_for_one_request_is_summarised_in_pieces() -> None:
    log = Log()
    for number in range(14):  # about 1,450 tokens, nearly twice the trigger
        log.user(f"question {number} {WORDS}")
    log.answer("fine")
    log.user("last question")
    rounds = 0
    while isinstance(planned := plan(log.events), Compact):
        assert estimate_tokens(planned.request.as_params()) <= LIMITS.trigger
        log.compacted(f"summary {rounds}", planned.kept_from)
        rounds += 1
    assert planned is None and rounds == 2
    request = build_request(AGENT, log.events, {}, max_tokens=100)
    assert "summary 1" in texts(request.messages) and "last question" in texts(request.messages)
    assert "question 0 " not in texts(request.messages)


def test_an_older_message_too_large_for_any_summarising_request_is_cut_for_it() -> None:
    """Before, no boundary after it could be summarised in one request, and
    every later turn of the session failed: compaction gave up for good."""
    log = Log()
    log.user("a" * 8000 + "the end")  # 2,000 tokens: over the whole window
    log.answer("noted")
    planned = plan(conversation(3, log).events)
    assert isinstance(planned, Compact)
    assert estimate_tokens(planned.request.as_params()) <= LIMITS.trigger
    asked = texts(planned.request.messages)
    assert "characters left out" in asked and "the end" in asked
    assert log.events[0]["content"][0]["text"].endswith("the end")  # the log keeps it whole


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGMAAQAABQABpfZFQAAAAABJRU5ErkJggg=="
SMALL = pdf_base64(1)


def image(data: str = PNG) -> Json:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}


def document(data: str, **more: Any) -> Json:
    source = {"type": "base64", "media_type": "application/pdf", "data": data}
    return {"type": "document", "source": source, **more}


def blocks(request: ModelRequest) -> list[Json]:
    """Every content block of a request, those in tool results too."""
    found = []
    for message in request.messages:
        for block in message["content"]:
            found.append(block)
            if block.get("type") == "tool_result":
                found.extend(block["content"])
    return found


def test_an_older_pdf_too_large_for_the_summarising_request_is_a_note_of_it() -> None:
    """Before, the summarising request carried it whole, and no boundary after
    it could be summarised: every later turn ended at the compaction limit."""
    log = Log()
    log.user("hello")
    log.answer("hi")
    sent = log.add(
        "user.message",
        content=[{"type": "text", "text": "read this"}, document(pdf_base64(8), title="Q3")],
    )
    assert isinstance(plan(log.events), CompactionLimit)  # it cannot be sent at all
    log.add("session.status_idle", stop_reason={"type": "retries_exhausted"})
    log.user("what was in it?")
    planned = plan(log.events)
    assert isinstance(planned, Compact)
    assert estimate_tokens(planned.request.as_params()) <= LIMITS.trigger
    assert not [b for b in blocks(planned.request) if b["type"] == "document"]
    [note] = [b["text"] for b in blocks(planned.request) if "left out" in b.get("text", "")]
    assert "document (application/pdf, 8 pages, 2 KB)" in note
    assert 'titled "Q3"' in note and sent["id"] in note
    assert sent["content"][1] == document(pdf_base64(8), title="Q3")  # the log keeps it


def test_media_are_shown_while_they_fit_an_events_room_and_noted_past_it() -> None:
    """A message with an image, then eleven images (17,600 tokens) in one tool
    result: each event's media take at most a quarter of a summarising
    request's room (some 4,000 tokens of a 20,000-token window)."""
    limits = ContextLimits(window=20_000, threshold=0.8, keep_ratio=0.25, max_consecutive=3)
    log = Log()
    log.add("user.message", content=[{"type": "text", "text": "look"}, image()])
    start = log.add("span.model_request_start")
    use = log.add("agent.tool_use", name="read", input={"file_path": "shots"})
    log.add("span.model_request_end", model_request_start_id=start["id"], model_usage={})
    shots = [image(PNG[:-4] + f"{n:02d}==") for n in range(11)]
    log.add("agent.tool_result", tool_use_id=use["id"], content=shots)
    log.answer("seen")
    log.user("next")
    planned = plan(log.events, limits)
    assert isinstance(planned, Compact)
    shown = blocks(planned.request)
    kept = [b for b in shown if b["type"] == "image"]
    notes = [b["text"] for b in shown if "left out" in b.get("text", "")]
    assert kept == [image(), *shots[:2]]  # two of 1,600 tokens fit the room
    assert len(notes) == 9
    where = f"image (image/png, 67 B), in the result of tool call {use['id']}"
    assert all(note.startswith(f"[{where}: ") for note in notes)
    assert estimate_tokens(planned.request.as_params()) <= limits.trigger


def test_media_are_sized_as_the_model_counted_the_request_it_refused() -> None:
    """A one-page PDF (3,000 tokens by the estimate, a 20,000-token window):
    it fits the summarising request's room for it, until the model refuses
    the request it is in as ten times the estimate. The summarising request
    that showed it whole was refused too, and the turn ended there."""
    limits = ContextLimits(window=20_000, threshold=0.8, keep_ratio=0.25, max_consecutive=3)
    log = Log()
    log.user("hello")
    log.answer("hi")
    log.add("user.message", content=[{"type": "text", "text": "a large one"}, document(SMALL)])
    log.answer("read")
    log.user("w" * 60_000)  # past the trigger: the older part is summarised
    log.answer("ok")
    log.user("next")
    planned = plan(log.events, limits)
    assert isinstance(planned, Compact)
    assert document(SMALL) in blocks(planned.request)  # its estimate fits
    assert planned.without_media is not None
    assert document(SMALL) not in blocks(planned.without_media)
    assert "application/pdf, 1 page" in texts(planned.without_media.messages)

    log = Log()
    log.user("hello")
    log.answer("hi")
    log.add("user.message", content=[{"type": "text", "text": "a large one"}, document(SMALL)])
    refused_as_too_long(log, 33_000)
    planned = plan(log.events, limits)
    assert isinstance(planned, Compact)
    assert document(SMALL) not in blocks(planned.request)
    assert "application/pdf, 1 page" in texts(planned.request.messages)
    assert planned.without_media is None  # it shows no medium


def refused_as_too_large(log: Log, size: int) -> None:
    """The model's API refused the log's request, of ``size`` bytes, as larger
    than it takes (413), as the runtime records it."""
    start = log.add("span.model_request_start")
    log.add(
        "span.model_request_end",
        model_request_start_id=start["id"],
        model_usage={},
        is_error=True,
        _internal={"too_large": size},
    )
    error = {"type": "model_request_failed_error", "retry_status": {"type": "retrying"}}
    log.add("session.error", error=error)


def pictures(log: Log, count: int) -> None:
    for number in range(count):
        picture = image(b64encode(random.Random(number).randbytes(30_000)).decode())
        text = {"type": "text", "text": f"picture {number}"}
        log.add("user.message", content=[text, picture])
        log.answer(f"seen {number}")


def test_after_a_request_refused_for_its_bytes_the_part_kept_holds_half_as_many() -> None:
    """Five pictures of 40 KB in base64, 8,000 tokens: far under the window,
    over the API's bytes. The summarising request shows none of them, and the
    part kept word for word holds at most half the refused request's bytes:
    by its tokens alone it would keep three."""
    limits = ContextLimits(window=20_000, threshold=0.8, keep_ratio=0.25, max_consecutive=3)
    log = Log()
    pictures(log, 5)
    log.user("and now?")
    assert plan(log.events, limits) is None
    refused_as_too_large(log, 201_000)
    planned = plan(log.events, limits)
    assert isinstance(planned, Compact)
    assert planned.context_tokens > limits.window
    assert not [b for b in blocks(planned.request) if b["type"] == "image"]
    notes = [b["text"] for b in blocks(planned.request) if "left out" in b.get("text", "")]
    assert len(notes) == 3 and planned.without_media is None
    kept = [e for e in log.events if e["_seq"] >= planned.kept_from]
    assert [e["content"][0]["text"] for e in kept if e["type"] == "user.message"] == [
        "picture 3",
        "picture 4",
        "and now?",
    ]
    log.compacted("summary", planned.kept_from)
    assert plan(log.events, limits) is None  # the limit held for that compaction only


def test_a_recent_message_with_more_bytes_than_half_a_refused_request_reaches_the_limit() -> None:
    """Refused for its bytes, then the turn ended before it compacted (an
    interrupt, say): a message that alone holds more than half as many cannot
    be kept, and the turn ends saying why."""
    limits = ContextLimits(window=20_000, threshold=0.8, keep_ratio=0.25, max_consecutive=3)
    log = Log()
    pictures(log, 2)
    refused_as_too_large(log, 81_000)
    log.add("session.status_idle", stop_reason={"type": "end_turn"})
    two = [b for e in log.events if e["type"] == "user.message" for b in e["content"][1:]]
    log.add("user.message", content=[{"type": "text", "text": "two more"}, *two])
    planned = plan(log.events, limits)
    assert isinstance(planned, CompactionLimit)
    assert "refused a request of 0.1 MB as larger than it takes" in planned.message


def test_thinking_reaches_the_summarising_request_exactly_as_written() -> None:
    """The model takes its thinking back unchanged or refuses the request: the
    cuts for a summarising request leave thinking and signatures alone."""
    log = Log()
    log.user(f"hello {WORDS}")
    start = log.add("span.model_request_start")
    signature = "s" * 1100  # longer than the least a cut text keeps
    log.add("agent.thinking", _internal={"thinking": "t" * 100, "signature": signature})
    log.add("agent.message", content=[{"type": "text", "text": "noted"}])
    log.add("span.model_request_end", model_request_start_id=start["id"], model_usage={})
    log.user("a" * 8000)
    log.answer("ok")
    planned = plan(conversation(3, log).events)
    assert isinstance(planned, Compact)
    asked = texts(planned.request.messages)
    assert "characters left out" in asked  # the long message was cut
    blocks = [b for m in planned.request.messages for b in m["content"]]
    [thinking] = [b for b in blocks if b.get("type") == "thinking"]
    assert (thinking["thinking"], thinking["signature"]) == ("t" * 100, signature)


def test_a_summary_that_came_back_long_does_not_stop_the_next_compaction() -> None:
    log = conversation(4)
    planned = plan(log.events)
    assert isinstance(planned, Compact)
    log.compacted("s" * 3000, planned.kept_from)  # 750 tokens: nearly the trigger alone
    again = plan(conversation(4, log, asked="more").events)
    assert isinstance(again, Compact)
    assert estimate_tokens(again.request.as_params()) <= LIMITS.trigger


def test_the_recorded_body_holds_the_summary_privately() -> None:
    planned = plan(conversation(5).events)
    assert isinstance(planned, Compact)
    answer = ModelResponse([{"type": "text", "text": " the gist "}], "end_turn")
    body = compacted_body(answer, planned)
    assert body["_internal"] == {"summary": "the gist", "kept_from": planned.kept_from}
    assert body["pre_compaction_tokens"] == planned.context_tokens
    with pytest.raises(UpstreamError):
        compacted_body(ModelResponse([], "end_turn"), planned)


def test_windows_come_from_the_settings_then_the_defaults() -> None:
    assert context_window("claude-opus-4-6", {}) == 200_000
    assert context_window("local", {}, ["local"]) == 128_000
    assert context_window("local", {"local": 32_000}, ["local"]) == 32_000


@pytest.mark.parametrize("turns", [1, 6])
def test_a_request_built_already_gives_the_same_plan(turns: int) -> None:
    events = conversation(turns).events
    built = build_request(AGENT, events, {}, max_tokens=100)
    given = plan_compaction(AGENT, events, {}, max_tokens=100, limits=LIMITS, request=built)
    assert given == plan(events)
    assert (given is None) == (turns == 1)
