"""List prices of models, in USD per million tokens, and the table stead prices by.

The defaults are Anthropic's public list prices (platform.claude.com "Pricing",
read 2026-11) for the Claude models whose price is one flat rate. Models priced
in bands or whose price was about to change (Haiku 5.5, Sonnet 5, Sonnet 5.5,
Opus 5.5, Fable and Mythos 5.2) are left out rather than guessed: until the
operator prices them with ``STEAD_MODEL_PRICES`` they cannot be budgeted
(``model_not_budgetable``) and their requests count no list cost. A model an
OpenAI-compatible server answers (``STEAD_OPENAI_MODELS``) costs zero unless
priced there too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

NANOS_PER_USD_PER_MTOK = 1000
"""A price of $1 per million tokens is 1,000 nano-USD per token."""


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of each kind."""

    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float

    @classmethod
    def standard(cls, input: float, output: float, cache_read: float | None = None) -> Price:
        """A price with Anthropic's prompt-cache multipliers: 5-minute writes 1.25x
        input, 1-hour writes 2x, reads 0.1x (unless given)."""
        read = input * 0.1 if cache_read is None else cache_read
        return cls(input, output, input * 1.25, input * 2, read)

    def per_token_nanos(self) -> tuple[int, int, int, int, int]:
        """(input, output, 5m write, 1h write, read) in whole nano-USD per token:
        list prices have at most three decimals, so this is exact."""
        return (
            round(self.input * NANOS_PER_USD_PER_MTOK),
            round(self.output * NANOS_PER_USD_PER_MTOK),
            round(self.cache_write_5m * NANOS_PER_USD_PER_MTOK),
            round(self.cache_write_1h * NANOS_PER_USD_PER_MTOK),
            round(self.cache_read * NANOS_PER_USD_PER_MTOK),
        )


FREE = Price(0.0, 0.0, 0.0, 0.0, 0.0)

_OPUS_45 = Price.standard(5, 25)
_OPUS_4 = Price.standard(15, 75)
_SONNET_4 = Price.standard(3, 15)
_HAIKU_45 = Price.standard(1, 5)
_FABLE_5 = Price.standard(10, 50)
_FABLE_51 = Price.standard(10, 50, cache_read=0.25)

DEFAULT_PRICES: Mapping[str, Price] = MappingProxyType(
    {
        "claude-fable-5-1": _FABLE_51,
        "claude-mythos-5-1": _FABLE_51,
        "claude-fable-5": _FABLE_5,
        "claude-mythos-5": _FABLE_5,
        "claude-opus-5": _OPUS_45,
        "claude-opus-4-8": _OPUS_45,
        "claude-opus-4-7": _OPUS_45,
        "claude-opus-4-6": _OPUS_45,
        "claude-opus-4-5": _OPUS_45,
        "claude-opus-4-5-20251101": _OPUS_45,
        "claude-opus-4-1": _OPUS_4,
        "claude-opus-4-0": _OPUS_4,
        "claude-sonnet-4-6": _SONNET_4,
        "claude-sonnet-4-5": _SONNET_4,
        "claude-sonnet-4-5-20250929": _SONNET_4,
        "claude-sonnet-4-0": _SONNET_4,
        "claude-haiku-4-5": _HAIKU_45,
        "claude-haiku-4-5-20251001": _HAIKU_45,
    }
)


class PriceTable:
    """Which price a model id has: configured, else the default, else zero for a
    model an OpenAI-compatible server answers, else none (unpriced)."""

    def __init__(self, configured: Mapping[str, Price], free: Iterable[str] = ()) -> None:
        self._prices = {**{name: FREE for name in free}, **DEFAULT_PRICES, **configured}

    def price(self, model: str) -> Price | None:
        return self._prices.get(model)

    def priced(self, model: str) -> bool:
        return model in self._prices


def price_table(configured: Mapping[str, Mapping[str, float]], free: Iterable[str]) -> PriceTable:
    """The table from ``STEAD_MODEL_PRICES`` (model -> {input, output, and optionally
    cache_write_5m, cache_write_1h, cache_read}; missing cache prices follow
    the standard multipliers) and the OpenAI-compatible models, free unless priced."""
    prices = {}
    for model, given in configured.items():
        base = Price.standard(given["input"], given["output"], given.get("cache_read"))
        prices[model] = Price(
            base.input,
            base.output,
            given.get("cache_write_5m", base.cache_write_5m),
            given.get("cache_write_1h", base.cache_write_1h),
            base.cache_read,
        )
    return PriceTable(prices, free)
