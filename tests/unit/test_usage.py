"""Usage accounting and list prices (``stead.usage``, ``stead.prices``): pure arithmetic."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from stead.config import Settings
from stead.prices import DEFAULT_PRICES, FREE, Price, price_table
from stead.usage import added, at_cap, cap_nanos, cents, request_usage, wire

SONNET = DEFAULT_PRICES["claude-sonnet-4-6"]


def test_a_request_costs_each_kind_of_token_at_its_price() -> None:
    reported = {
        "input_tokens": 100_000,
        "output_tokens": 10_000,
        "cache_creation_input_tokens": 20_000,
        "cache_read_input_tokens": 20_000,
    }
    used = request_usage(reported, SONNET)
    # $3, $15, $3.75 and $0.30 per million tokens: 30 + 15 + 7.5 + 0.6 cents.
    assert used["list_cost_nanos"] == 531_000_000
    assert used["ephemeral_5m_input_tokens"] == 20_000
    assert used["ephemeral_1h_input_tokens"] == 0
    assert used["requests"] == 1
    assert "unpriced_requests" not in used


def test_one_hour_cache_writes_cost_twice_the_input_price() -> None:
    reported = {"cache_creation_input_tokens": 3_000, "ephemeral_1h_input_tokens": 1_000}
    used = request_usage(reported, SONNET)
    assert (used["ephemeral_5m_input_tokens"], used["ephemeral_1h_input_tokens"]) == (2000, 1000)
    assert used["list_cost_nanos"] == 2_000 * 3_750 + 1_000 * 6_000


def test_an_unpriced_model_counts_tokens_and_no_cost() -> None:
    used = request_usage({"input_tokens": 5, "output_tokens": 7}, None)
    assert used["unpriced_requests"] == 1 and "list_cost_nanos" not in used
    assert wire(used)["list_cost"] == {"amount": "0", "currency": "USD"}


def test_the_wire_form_rounds_the_cost_to_the_cent() -> None:
    total = added(added({}, {"list_cost_nanos": 5_000_000}), {"list_cost_nanos": 1})
    assert cents(total["list_cost_nanos"]) == 1  # half a cent and a bit
    assert cents(4_999_999) == 0
    shown = wire({**total, "active_seconds": 1.23456, "cache_creation_input_tokens": 4})
    assert shown["list_cost"]["amount"] == "1"
    assert shown["active_seconds"] == 1.235
    created = shown["cache_creation"]
    assert created == {"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 0}


def test_the_ledger_s_one_hour_cache_writes_leave_no_negative_five_minute_ones() -> None:
    """The ledger's rows keep the split counts without their total; the
    fallback for usage stored before the split made -40000 of them."""
    created = wire({"ephemeral_1h_input_tokens": 40_000})["cache_creation"]
    assert created == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 40_000}


def test_a_budget_is_reached_at_its_amount_or_after_an_unpriced_request() -> None:
    budget = {"type": "limit", "max_list_cost": {"amount": "50", "currency": "USD"}}
    assert cap_nanos(budget) == 500_000_000
    assert not at_cap(budget, {"list_cost_nanos": 499_999_999})
    assert at_cap(budget, {"list_cost_nanos": 500_000_000})
    assert at_cap(budget, {"unpriced_requests": 1})
    assert not at_cap(None, {"list_cost_nanos": 10**15, "unpriced_requests": 3})


def test_configured_prices_win_and_openai_models_are_free_unless_priced() -> None:
    table = price_table(
        {"local-big": {"input": 2, "output": 4}, "claude-sonnet-4-6": {"input": 1, "output": 1}},
        ["llama", "local-big"],
    )
    assert table.price("llama") == FREE
    assert table.price("local-big") == Price(2, 4, 2.5, 4, 0.2)
    assert table.price("claude-sonnet-4-6") == Price(1, 1, 1.25, 2, 0.1)
    assert table.price("claude-haiku-4-5") == DEFAULT_PRICES["claude-haiku-4-5"]
    assert not table.priced("some-unknown-model")


def test_model_prices_are_checked_when_settings_are_read() -> None:
    with pytest.raises(ValidationError, match="give input and output"):
        Settings(model_prices={"m": {"input": 1}})
    with pytest.raises(ValidationError, match="a number from 0 to 1,000,000"):
        Settings(model_prices={"m": {"input": -1, "output": 1}})
    for endless in ("nan", "inf"):  # every request to the model would fail
        with pytest.raises(ValidationError, match="a number from 0 to 1,000,000"):
            Settings(model_prices={"m": {"input": float(endless), "output": 1}})
    assert Settings(model_prices={"m": {"input": 1, "output": 2, "cache_read": 0}}).model_prices
