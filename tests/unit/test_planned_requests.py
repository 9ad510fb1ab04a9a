"""``PlannedRequests``: a claim's planned first request is taken once, by the
span the claim opened, and the oldest age out past the bounds of count and weight."""

from __future__ import annotations

from stead.harness import ModelRequest
from stead.runtime.planned import PlannedRequest, PlannedRequests


def _planned(text: str) -> PlannedRequest:
    messages = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    request = ModelRequest("claude-sonnet-4-6", None, [], messages, 1024)
    return PlannedRequest(request, f"key-{text}", ())


def test_a_planned_request_is_taken_once_by_its_span() -> None:
    held = PlannedRequests()
    held.put("sevt_a", _planned("a"))
    held.put("sevt_b", _planned("b"))
    taken = held.take("sevt_b")
    assert taken is not None and taken.key == "key-b"
    assert held.take("sevt_b") is None
    assert held.take("sevt_unknown") is None
    assert (found := held.take("sevt_a")) is not None and found.key == "key-a"


def test_the_oldest_plans_age_out_past_the_bound() -> None:
    held = PlannedRequests(most=2)
    for name in ("a", "b", "c"):
        held.put(f"sevt_{name}", _planned(name))
    assert held.take("sevt_a") is None
    assert [held.take(f"sevt_{n}") is not None for n in ("b", "c")] == [True, True]


def test_the_oldest_plans_age_out_past_the_weight_bound_but_the_last_stays() -> None:
    held = PlannedRequests(most=10, max_bytes=50_000)
    held.put("sevt_small", _planned("s"))
    held.put("sevt_big", _planned("b" * 20_000))
    assert [held.take(f"sevt_{n}") is not None for n in ("small", "big")] == [True, True]
    # Taken requests weigh nothing any more: two big ones fit again.
    held.put("sevt_small", _planned("s"))
    held.put("sevt_big", _planned("b" * 20_000))
    held.put("sevt_bigger", _planned("c" * 30_000))  # over 50,000: the oldest go
    assert held.take("sevt_small") is None
    assert held.take("sevt_big") is None
    assert held.take("sevt_bigger") is not None
    held.put("sevt_huge", _planned("h" * 100_000))  # over the bound alone: kept
    assert held.take("sevt_huge") is not None
