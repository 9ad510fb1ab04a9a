"""``LogCache`` holds at most ``capacity`` sessions, ``max_events`` events and
``max_bytes`` of their weight, forgetting the least recently used sessions first
and never the one just kept."""

from __future__ import annotations

from datetime import UTC, datetime

from stead.runtime.logcache import LogCache
from stead.store import EventRecord
from stead.store.inmemory import InMemoryStore


def records(session_id: str, first: int, count: int, size: int = 0) -> list[EventRecord]:
    now = datetime.now(UTC)
    body = {"content": [{"type": "text", "text": "x" * size}]} if size else {}
    return [
        EventRecord(session_id, f"sevt_{session_id}_{seq}", "user.message", body, now, seq)
        for seq in range(first, first + count)
    ]


def held(cache: LogCache, *sessions: str) -> dict[str, int]:
    return {s: len(cache.held(s)[1]) for s in sessions if cache.since(s)}


def test_the_least_recently_used_sessions_go_when_too_many_events_are_held() -> None:
    cache = LogCache(InMemoryStore(), capacity=10, max_events=10)
    cache.add("a", 0, records("a", 1, 4))
    cache.add("b", 0, records("b", 1, 4))
    cache.add("a", 4, records("a", 5, 1))  # "a" is now the most recently used
    assert held(cache, "a", "b") == {"a": 5, "b": 4}
    cache.add("c", 0, records("c", 1, 3))
    assert held(cache, "a", "b", "c") == {"a": 5, "c": 3}
    # More than the bound alone: kept, and everything else goes.
    cache.add("d", 0, records("d", 1, 12))
    assert held(cache, "a", "b", "c", "d") == {"d": 12}
    # A session that grew past what was forgotten is read again, not patched.
    assert cache.add("a", 5, records("a", 6, 1)) is None


def test_the_least_recently_used_sessions_go_when_too_many_sessions_are_held() -> None:
    cache = LogCache(InMemoryStore(), capacity=2, max_events=100)
    for session in "abc":
        cache.add(session, 0, records(session, 1, 2))
    assert held(cache, "a", "b", "c") == {"b": 2, "c": 2}


def test_the_least_recently_used_sessions_go_when_the_logs_weigh_too_much() -> None:
    # Two events of a few dozen bytes and two of 30,000: counting events alone
    # would hold any number of sessions like the second.
    cache = LogCache(InMemoryStore(), capacity=10, max_events=1000, max_bytes=50_000)
    cache.add("light", 0, records("light", 1, 2))
    cache.add("heavy", 0, records("heavy", 1, 1, size=30_000))
    assert held(cache, "light", "heavy") == {"light": 2, "heavy": 1}
    cache.add("heavy", 1, records("heavy", 2, 1, size=30_000))
    assert held(cache, "light", "heavy") == {"heavy": 2}  # over the bound alone: kept
    cache.add("light", 0, records("light", 1, 2))
    assert held(cache, "light", "heavy") == {"light": 2}
    # What went is forgotten with its weight: the light session alone fits again.
    cache.add("other", 0, records("other", 1, 1, size=40_000))
    assert held(cache, "light", "other") == {"light": 2, "other": 1}
