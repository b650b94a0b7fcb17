"""Prices per million tokens, used to count and cap a run's cost.

The table is deliberately small and user-extendable: prices change, and a wrong built-in price is worse
than an explicit one. Pass ``prices={"my-model": (input_usd_per_mtok, output_usd_per_mtok)}`` to `RLM`
or call `register_price`. A model with no known price costs 0 and is reported as unpriced.
"""

from __future__ import annotations

from collections.abc import Mapping

PricePair = tuple[float, float]

DEFAULT_PRICES: dict[str, PricePair] = {
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.60),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
}

_registered: dict[str, PricePair] = {}


def register_price(model: str, input_per_mtok: float, output_per_mtok: float) -> None:
    """Add or override the price of `model` for every run in this process."""
    if input_per_mtok < 0 or output_per_mtok < 0:
        raise ValueError(f"prices must be >= 0, got {(input_per_mtok, output_per_mtok)!r} for {model!r}")
    _registered[model] = (input_per_mtok, output_per_mtok)


class PriceTable:
    """Looks up a model's price: run-level overrides, then registered, then built-in prices.

    A dated model name (``gpt-5-mini-2025-08-07``) falls back to its longest priced prefix.
    """

    def __init__(self, overrides: Mapping[str, PricePair] | None = None) -> None:
        self._prices: dict[str, PricePair] = {**DEFAULT_PRICES, **_registered, **(overrides or {})}

    def price(self, model: str) -> PricePair | None:
        """The (input, output) USD per million tokens of `model`, or None when unknown."""
        if model in self._prices:
            return self._prices[model]
        best = max((name for name in self._prices if model.startswith(name + "-")), key=len, default=None)
        return self._prices[best] if best else None

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        """The cost of one call; 0.0 for an unpriced model."""
        pair = self.price(model)
        if pair is None:
            return 0.0
        return (input_tokens * pair[0] + output_tokens * pair[1]) / 1_000_000
