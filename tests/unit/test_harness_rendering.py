"""A log rendered from where its last rendering ended gives the very messages a
whole render gives, and the very canonical text: the request, and so its op
key, cannot tell them apart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

from hypothesis import given, settings
from hypothesis import strategies as st

from stead.harness import ModelRequest, build_messages, rendering
from stead.jsonvalues import canonical
from stead.runtime.renderings import Renderings

Json = dict[str, Any]

_text = st.text(alphabet="abc xyz", min_size=0, max_size=6)
_blocks = st.lists(st.builds(lambda t: {"type": "text", "text": t}, _text), max_size=3)


def _event(kind: str, n: int, draw: Any) -> Json:
    event: Json = {"type": kind, "id": f"e{n}", "_seq": n}
    if kind in ("user.message", "agent.message", "system.message"):
        event["content"] = draw(_blocks)
    elif kind in ("agent.tool_use", "agent.custom_tool_use"):
        event |= {"name": draw(st.sampled_from(["bash", "read"])), "input": {"n": n}}
    elif kind == "agent.mcp_tool_use":
        event |= {"mcp_server_name": "srv", "name": "tool", "input": {}}
    elif kind in ("agent.tool_result", "user.tool_result"):
        event |= {"tool_use_id": f"e{n - 1}", "content": draw(_blocks)}
        event |= {"is_error": True} if draw(st.booleans()) else {}
    elif kind == "user.custom_tool_result":
        event |= {"custom_tool_use_id": f"e{n - 1}", "content": draw(_blocks)}
    elif kind == "agent.mcp_tool_result":
        event |= {"mcp_tool_use_id": f"e{n - 1}", "content": draw(_blocks)}
    elif kind == "agent.thinking":
        event["_internal"] = draw(
            st.sampled_from([{}, {"thinking": "hm", "signature": "s"}, {"redacted": "x"}])
        )
    elif kind == "agent.thread_context_compacted":
        kept_from = draw(st.integers(min_value=1, max_value=n))
        event["_internal"] = {"summary": draw(_text), "kept_from": kept_from}
    return event


KINDS = [
    "user.message",
    "agent.message",
    "system.message",
    "agent.tool_use",
    "agent.custom_tool_use",
    "agent.mcp_tool_use",
    "agent.tool_result",
    "user.tool_result",
    "user.custom_tool_result",
    "agent.mcp_tool_result",
    "agent.thinking",
    "span.model_request_start",
    "session.status_idle",
    "session.usage",
    "agent.thread_context_compacted",
]


@st.composite
def logs(draw: Any) -> list[Json]:
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=40))
    return [_event(kind, n, draw) for n, kind in enumerate(kinds, start=1)]


@settings(max_examples=300, deadline=None)
@given(logs(), st.lists(st.integers(min_value=1, max_value=40), max_size=4))
def test_a_log_rendered_in_parts_is_the_log_rendered_whole(
    log: list[Json], cuts: list[int]
) -> None:
    current = None
    for cut in sorted(c for c in cuts if c <= len(log)):
        current = rendering(log[:cut], current)
        assert current is not None
        assert current.messages() == build_messages(log[:cut])
        _same_text(*current.messages_with_json())
    whole = rendering(log, current)
    assert whole is not None
    assert whole.messages() == build_messages(log)
    _same_text(*whole.messages_with_json())
    # What a cache counts it for is what it holds, however it came to be.
    afresh = rendering(log)
    assert afresh is not None
    assert (whole.weight, whole.finished_weight) == (afresh.weight, afresh.finished_weight)
    assert whole.weight >= sum(len(text) for text in whole.finished_json)


def _same_text(messages: list[Json], messages_json: str | None) -> None:
    """The kept canonical text is the messages' own, and so is the request's."""
    if messages_json is None:
        return
    assert messages_json == canonical(messages)
    tools = [{"name": "bash", "input_schema": {"type": "object"}}]
    request = ModelRequest("m", [{"type": "text", "text": "s"}], tools, messages, 9, messages_json)
    assert request.canonical_params == canonical(request.as_params())


def _rendered(renderings: Renderings, session_id: str, log: list[Json]) -> list[Json]:
    messages, messages_json = renderings.messages(session_id, log)
    _same_text(messages, messages_json)
    return messages


def test_a_log_with_a_compaction_is_rendered_from_its_summary_on() -> None:
    log = [
        {"type": "user.message", "id": "e1", "_seq": 1, "content": [{"type": "text", "text": "a"}]},
        {
            "type": "agent.message",
            "id": "e2",
            "_seq": 2,
            "content": [{"type": "text", "text": "b"}],
        },
    ]
    before = rendering(log)
    compaction = {
        "type": "agent.thread_context_compacted",
        "id": "e3",
        "_seq": 3,
        "_internal": {"summary": "s", "kept_from": 2},
    }
    compacted = [*log, compaction]
    after = rendering(compacted, before)
    assert after is not None
    assert after.messages() == build_messages(compacted)
    said = _said("user.message", 4, "c")
    carried = rendering([*compacted, said], after)
    assert carried is not None
    assert carried.messages() == build_messages([*compacted, said])
    assert carried.finished[0] is after.finished[0]  # carried on, not rendered again


def test_a_session_s_renderings_follow_its_log_and_start_over_for_another() -> None:
    renderings = Renderings(most=1)
    log: list[Json] = []
    for n in range(1, 30):
        kind = "user.message" if n % 3 == 1 else "agent.message"
        log.append(
            {"type": kind, "id": f"e{n}", "_seq": n, "content": [{"type": "text", "text": f"{n}"}]}
        )
        assert _rendered(renderings, "sesn_1", log) == build_messages(log)
        if n == 15:
            compaction = {
                "type": "agent.thread_context_compacted",
                "id": "c",
                "_seq": 16,
                "_internal": {"summary": "so far", "kept_from": 10},
            }
            other = [*log, compaction]
            assert _rendered(renderings, "sesn_1", other) == build_messages(other)
    # Not a longer form of the log last rendered for the session: rendered whole.
    other_log = [dict(e, id=f"x{e['id']}") for e in log[:5]]
    assert _rendered(renderings, "sesn_1", other_log) == build_messages(other_log)
    # A second session pushes the first out (most=1); both still render right.
    assert _rendered(renderings, "sesn_2", log[:3]) == build_messages(log[:3])
    assert _rendered(renderings, "sesn_1", log) == build_messages(log)


def _said(kind: str, n: int, text: str | None = None) -> Json:
    content = [{"type": "text", "text": f"{n}" if text is None else text}]
    return {"type": kind, "id": f"e{n}", "_seq": n, "content": content}


def test_renderings_hold_at_most_so_many_events_but_always_the_last() -> None:
    renderings = Renderings(most=10, max_events=5)
    first = [_said("user.message", n) for n in range(1, 4)]
    second = [_said("agent.message", n) for n in range(10, 14)]
    assert _rendered(renderings, "sesn_1", first) == build_messages(first)
    assert _rendered(renderings, "sesn_2", second) == build_messages(second)  # 3 + 4 > 5
    assert renderings.held() == ["sesn_2"]
    longer = [*second, *(_said("user.message", n) for n in range(14, 20))]
    assert _rendered(renderings, "sesn_2", longer) == build_messages(longer)
    assert renderings.held() == ["sesn_2"]  # over the bound alone: the last stays


def _long(kind: str, n: int, size: int) -> Json:
    return {
        "type": kind,
        "id": f"e{n}",
        "_seq": n,
        "content": [{"type": "text", "text": "x" * size}],
    }


def test_renderings_hold_at_most_so_many_bytes_but_always_the_last() -> None:
    # Few events, but one image's tool result weighs megabytes: counting events
    # alone would let a cache of such sessions grow without bound.
    renderings = Renderings(most=10, max_events=1000, max_bytes=50_000)
    small = [_long("user.message", 1, 10), _long("agent.message", 2, 10)]
    big = [_long("user.message", 1, 10_000), _long("agent.message", 2, 10_000)]
    _rendered(renderings, "sesn_small", small)
    _rendered(renderings, "sesn_big", big)
    assert renderings.held() == ["sesn_small", "sesn_big"]
    bigger = [*big, _long("user.message", 3, 10_000), _long("agent.message", 4, 10)]
    assert _rendered(renderings, "sesn_big", bigger) == build_messages(bigger)
    # Three finished messages of 10,000 characters and their texts: over the bound.
    assert renderings.held() == ["sesn_big"]
    _rendered(renderings, "sesn_small", small)
    assert renderings.held() == ["sesn_small"]


def _idle(n: int, reason: str) -> Json:
    idle = "session.status_idle"
    return {"type": idle, "id": f"e{n}", "_seq": n, "stop_reason": {"type": reason}}


def _texts(messages: list[Json]) -> list[tuple[str, list[str]]]:
    return [(m["role"], [b["text"] for b in m["content"]]) for m in messages]


def test_a_refused_turn_never_reaches_the_model_again() -> None:
    """From the idle that ended the turn before it, through the refusal's idle:
    an idle that waited for input in between ends no turn. The log keeps it all."""
    custom_use = {"type": "agent.custom_tool_use", "id": "e6", "_seq": 6, "name": "look"}
    custom_use["input"] = {}
    log = [
        _said("user.message", 1, "hello"),
        _said("agent.message", 2, "hi"),
        _idle(3, "end_turn"),
        _said("user.message", 4, "something refused"),
        _said("agent.message", 5, "let me look"),
        custom_use,
        _idle(7, "requires_action"),
        {"type": "user.custom_tool_result", "id": "e8", "_seq": 8, "custom_tool_use_id": "e6"},
        _said("agent.message", 9, "I can't"),
        _idle(10, "refusal"),
        _said("user.message", 11, "something else"),
    ]
    assert _texts(build_messages(log)) == [
        ("user", ["hello"]),
        ("assistant", ["hi"]),
        ("user", ["something else"]),
    ]
    # A session whose first turn was refused starts afresh.
    assert _texts(build_messages(log[3:])) == [("user", ["something else"])]
    # Not carried on from a rendering: a refusal in the new part renders the log whole.
    before = rendering(log[:9])
    assert before is not None
    assert rendering(log, before) is None
    assert rendering(log) is None
    renderings = Renderings()
    assert _rendered(renderings, "sesn_1", log[:9]) == build_messages(log[:9])
    assert _rendered(renderings, "sesn_1", log) == build_messages(log)


def test_a_refused_turn_after_a_compaction_is_dropped_and_the_summary_kept() -> None:
    compaction = {
        "type": "agent.thread_context_compacted",
        "id": "e3",
        "_seq": 3,
        "_internal": {"summary": "so far", "kept_from": 2},
    }
    log = [
        _said("user.message", 1, "old"),
        _said("agent.message", 2, "kept"),
        compaction,
        _idle(4, "end_turn"),
        _said("user.message", 5, "refused"),
        _idle(6, "refusal"),
        _said("user.message", 7, "next"),
    ]
    messages = build_messages(log)
    assert "so far" in messages[0]["content"][0]["text"]
    assert _texts(messages[1:]) == [("assistant", ["kept"]), ("user", ["next"])]


class _Reads(Sequence[Json]):
    """A log that counts the events read from it."""

    def __init__(self, events: list[Json]) -> None:
        self.events = events
        self.read = 0

    def __len__(self) -> int:
        return len(self.events)

    @overload
    def __getitem__(self, index: int) -> Json: ...
    @overload
    def __getitem__(self, index: slice) -> list[Json]: ...
    def __getitem__(self, index: int | slice) -> Json | list[Json]:
        found = self.events[index]
        self.read += len(found) if isinstance(index, slice) else 1
        return found


def test_a_step_after_a_compaction_reads_the_events_since_it_not_the_whole_log() -> None:
    log = [_said("user.message" if n % 2 else "agent.message", n) for n in range(1, 3001)]
    compaction = {
        "type": "agent.thread_context_compacted",
        "id": "c",
        "_seq": 3001,
        "_internal": {"summary": "so far", "kept_from": 2990},
    }
    log.append(compaction)
    renderings = Renderings()
    assert _rendered(renderings, "sesn_1", log) == build_messages(log)
    log += [_said("user.message", 3002), _said("agent.message", 3003)]
    reads = _Reads(log)
    messages, _ = renderings.messages("sesn_1", reads)
    assert messages == build_messages(log)
    # The step renders what was logged since its last: a long session's steps
    # did not each walk its whole log once it had compacted.
    assert reads.read < 50
