"""``Bounded``: the caches' least-recently-used map. Whichever bound is passed
(entries, the count they carry, their weight) the oldest entries go first; the
entry put last always stays; what goes is forgotten with its weight and count."""

from __future__ import annotations

from stead.runtime.bounded import Bounded


def test_the_oldest_go_past_the_entry_bound() -> None:
    held: Bounded[str, int] = Bounded(most=2, max_bytes=1000)
    for n, key in enumerate("abc"):
        held.put(key, n, weight=1)
    assert held.keys() == ["b", "c"]
    assert held.get("a") is None and held.get("c") == 2


def test_the_oldest_go_past_the_weight_bound_and_the_last_stays() -> None:
    held: Bounded[str, str] = Bounded(most=10, max_bytes=100)
    held.put("light", "l", weight=10)
    held.put("heavy", "h", weight=80)
    assert held.keys() == ["light", "heavy"]
    held.put("heavier", "x", weight=60)  # 150 held: the oldest go until under 100
    assert held.keys() == ["heavier"]
    held.put("huge", "u", weight=500)  # over the bound alone: kept, the rest go
    assert held.keys() == ["huge"]
    assert held.weight("huge") == 500 and held.weight("heavier") == 0


def test_the_oldest_go_past_the_count_bound() -> None:
    held: Bounded[str, str] = Bounded(most=10, max_bytes=1000, max_count=5)
    held.put("a", "log a", weight=1, count=3)
    held.put("b", "log b", weight=1, count=2)
    assert held.keys() == ["a", "b"]
    held.put("a", "log a, longer", weight=1, count=4)  # replaced: 4 + 2 > 5
    assert held.keys() == ["a"]
    assert held.get("a") == "log a, longer"


def test_reading_does_not_make_an_entry_recent_but_using_it_does() -> None:
    held: Bounded[str, int] = Bounded(most=2, max_bytes=1000)
    held.put("a", 1, weight=1)
    held.put("b", 2, weight=1)
    assert held.get("a") == 1
    held.put("c", 3, weight=1)
    assert held.keys() == ["b", "c"]  # "a" was only read
    assert held.use("b") == 2
    held.put("d", 4, weight=1)
    assert held.keys() == ["b", "d"]
    assert held.use("gone") is None  # nothing held: nothing happens
    assert held.keys() == ["b", "d"]


def test_what_is_popped_or_replaced_is_forgotten_with_its_weight() -> None:
    held: Bounded[str, int] = Bounded(most=10, max_bytes=100)
    held.put("a", 1, weight=90)
    assert held.pop("a") == 1 and held.pop("a") is None
    held.put("a", 1, weight=90)
    held.put("a", 2, weight=90)  # replaced, not added: 90 held, not 180
    held.put("b", 3, weight=10)
    assert held.keys() == ["a", "b"]


def test_a_map_of_values_all_alike_is_bounded_by_its_entries_alone() -> None:
    held: Bounded[str, str] = Bounded(most=2)
    held.put("a", "x" * 10_000_000, weight=10_000_000)  # no weight bound to pass
    held.put("b", "digest")
    assert held.keys() == ["a", "b"]
    held.put("c", "digest")
    assert held.keys() == ["b", "c"]
