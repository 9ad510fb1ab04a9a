"""Usage accounting: what one model request adds to a session's usage, the
session's usage as the API shows it, and whether its budget is reached.

A session's usage is a flat JSON object of counters (``COUNTERS`` and
``active_seconds``) kept in its row and added to in the transaction that
records what was used. Costs are whole nano-USD so sums never drift; the API
shows them in cents, rounded half up, as the spec's ``list_cost`` does. Pure
functions over plain values: the store, the runtime and the API share them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stead.prices import Price

NANOS_PER_CENT = 10**7

COUNTERS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "ephemeral_5m_input_tokens",
    "ephemeral_1h_input_tokens",
    "requests",
    "list_cost_nanos",
    "unpriced_requests",
)
"""Integer counters of a session's usage; ``unpriced_requests`` counts requests
to a model with no list price, whose cost is not in ``list_cost_nanos``."""
TOOL_COUNTERS = ("web_search_requests", "web_fetch_requests")
"""Counters of the web tools' calls that got their answer, in a session's usage
only (the ledger counts model requests): the API's ``server_tool_use``."""


def request_usage(reported: Mapping[str, int], price: Price | None) -> dict[str, int]:
    """What one model request adds: its tokens (cache writes split by TTL: the
    share the upstream does not report as 1-hour is 5-minute, stead's own
    breakpoints' TTL) and its list cost, or one unpriced request."""
    created = int(reported.get("cache_creation_input_tokens", 0))
    hour = min(created, int(reported.get("ephemeral_1h_input_tokens", 0)))
    added = {
        "input_tokens": int(reported.get("input_tokens", 0)),
        "output_tokens": int(reported.get("output_tokens", 0)),
        "cache_read_input_tokens": int(reported.get("cache_read_input_tokens", 0)),
        "cache_creation_input_tokens": created,
        "ephemeral_5m_input_tokens": created - hour,
        "ephemeral_1h_input_tokens": hour,
        "requests": 1,
    }
    if price is None:
        added["unpriced_requests"] = 1
    else:
        rates = price.per_token_nanos()
        amounts = (
            added["input_tokens"],
            added["output_tokens"],
            added["ephemeral_5m_input_tokens"],
            hour,
            added["cache_read_input_tokens"],
        )
        added["list_cost_nanos"] = sum(r * n for r, n in zip(rates, amounts, strict=True))
    return added


def added(usage: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """``usage`` with ``delta``'s counters added (a new dict)."""
    total = dict(usage)
    for key, value in delta.items():
        total[key] = total.get(key, 0) + value
    return total


def cents(nanos: int) -> int:
    return (nanos + NANOS_PER_CENT // 2) // NANOS_PER_CENT


def _five_minute_writes(usage: Mapping[str, Any]) -> int:
    """Usage stored before the TTL split was kept has only the total of cache
    writes, all 5-minute then; the ledger's rows have no total at all."""
    split = int(usage.get("ephemeral_5m_input_tokens") or 0)
    total = usage.get("cache_creation_input_tokens")
    if split or total is None:
        return split
    return max(0, int(total) - int(usage.get("ephemeral_1h_input_tokens") or 0))


def wire(usage: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's ``usage`` object (``Session.usage``, ``session.usage``)."""

    def count(key: str) -> int:
        return int(usage.get(key) or 0)

    return {
        "input_tokens": count("input_tokens"),
        "output_tokens": count("output_tokens"),
        "cache_read_input_tokens": count("cache_read_input_tokens"),
        "cache_creation": {
            "ephemeral_5m_input_tokens": _five_minute_writes(usage),
            "ephemeral_1h_input_tokens": count("ephemeral_1h_input_tokens"),
        },
        "list_cost": {"amount": str(cents(count("list_cost_nanos"))), "currency": "USD"},
        "active_seconds": round(float(usage.get("active_seconds") or 0.0), 3),
        **(
            {"server_tool_use": {name: count(name) for name in TOOL_COUNTERS}}
            if any(count(name) for name in TOOL_COUNTERS)
            else {}
        ),
    }


def report(counters: Mapping[str, Any]) -> dict[str, Any]:
    """A usage report's amounts (``GET /v1/usage``, ``stead usage``): ``wire``
    with the request counts."""
    shown = wire(counters)
    shown["requests"] = int(counters.get("requests", 0))
    shown["unpriced_requests"] = int(counters.get("unpriced_requests", 0))
    return shown


def cap_nanos(budget: Mapping[str, Any] | None) -> int | None:
    """The budget's ``max_list_cost`` (cents, as a string) in nano-USD; None: no budget."""
    if budget is None:
        return None
    return int(budget["max_list_cost"]["amount"]) * NANOS_PER_CENT


def at_cap(budget: Mapping[str, Any] | None, usage: Mapping[str, Any]) -> bool:
    """The session may make no more model requests: its list cost reached the
    budget, or a model with no list price ran under a budget (spec §3.4)."""
    cap = cap_nanos(budget)
    if cap is None:
        return False
    spent = int(usage.get("list_cost_nanos") or 0)
    return spent >= cap or int(usage.get("unpriced_requests") or 0) > 0
