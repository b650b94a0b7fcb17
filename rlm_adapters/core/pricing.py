"""Prices per million tokens, used to count and cap a run's cost.

The table is deliberately small and user-extendable: prices change, and a wrong built-in price is worse
than an explicit one. Pass ``prices={"my-model": (input_usd_per_mtok, output_usd_per_mtok)}`` to `RLM`
or call `register_price`. A model with no known price counts its tokens, costs 0, and is named once per
process (logger ``rlm_adapters.pricing``: a warning when a cost cap is set, else at INFO).

Names are matched as providers spell them: exactly, then with a gateway prefix removed (``openai/gpt-5``,
``models/gemini-2.5-flash``), a Bedrock region and vendor prefix and version suffix removed
(``us.anthropic.claude-sonnet-4-5-20250929-v1:0``), and a dated suffix removed (``gpt-5-mini-2025-08-07``).

Built-in prices are the providers' list prices for standard (non-batch, non-cached) text tokens as published
in November 2025 (no test can fetch them: check them before relying on ``max_cost``); Gemini 2.5 Pro's are
those of prompts up to 200k tokens.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping

PricePair = tuple[float, float]

logger = logging.getLogger("rlm_adapters.pricing")

DEFAULT_PRICES: dict[str, PricePair] = {
    # OpenAI (also Azure OpenAI deployments named after the model)
    "gpt-5.1": (1.25, 10.0),
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.5, 10.0),
    "gpt-4o-mini": (0.15, 0.60),
    # Anthropic (the same list prices on Amazon Bedrock)
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.80, 4.0),
    # Google Gemini (Gemini API and Vertex AI)
    "gemini-3-pro-preview": (2.0, 12.0),
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
    "gemini-2.0-flash-lite": (0.075, 0.30),
    # Amazon Nova on Bedrock
    "nova-premier": (2.50, 12.50),
    "nova-pro": (0.80, 3.20),
    "nova-lite": (0.06, 0.24),
    "nova-micro": (0.035, 0.14),
    # The scripted test model is free.
    "scripted": (0.0, 0.0),
}

_registered: dict[str, PricePair] = {}
_warned: set[str] = set()
_warned_lock = threading.Lock()

_BEDROCK_GEO = re.compile(r"^(?:us|eu|apac|ap|global|jp|au|ca|us-gov)\.")
_BEDROCK_VENDOR = re.compile(r"^(?:anthropic|amazon|meta|mistral|cohere|ai21|deepseek|openai|qwen|writer)\.")
_BEDROCK_VERSION = re.compile(r"(?:-v\d+)?(?::\d+)?$")


def candidate_names(model: str) -> Iterator[str]:
    """`model` as given, then with gateway, region and vendor prefixes and version suffixes removed."""
    yield model
    name = model.rsplit("/", 1)[-1]  # openai/gpt-5, bedrock/anthropic.claude-..., models/gemini-2.5-flash
    name = _BEDROCK_VENDOR.sub("", _BEDROCK_GEO.sub("", name))
    name = _BEDROCK_VERSION.sub("", name)
    yield name
    yield re.sub(r"(?<=\d)\.(?=\d)", "-", name)  # claude-sonnet-4.5 (OpenRouter, Vercel) is claude-sonnet-4-5


def register_price(model: str, input_per_mtok: float, output_per_mtok: float) -> None:
    """Add or override the price of `model` for every run in this process."""
    if input_per_mtok < 0 or output_per_mtok < 0:
        raise ValueError(f"prices must be >= 0, got {(input_per_mtok, output_per_mtok)!r} for {model!r}")
    _registered[model] = (input_per_mtok, output_per_mtok)


def forget_prices() -> None:
    """Forget the prices `register_price` added and which unpriced models were already named (tests)."""
    with _warned_lock:
        _warned.clear()
    _registered.clear()


class PriceTable:
    """Looks up a model's price: run-level overrides, then registered, then built-in prices.

    A dated model name (``gpt-5-mini-2025-08-07``) falls back to its longest priced prefix.
    """

    def __init__(self, overrides: Mapping[str, PricePair] | None = None) -> None:
        self._prices: dict[str, PricePair] = {**DEFAULT_PRICES, **_registered, **(overrides or {})}

    def price(self, model: str) -> PricePair | None:
        """The (input, output) USD per million tokens of `model`, or None when unknown."""
        for name in candidate_names(model):
            if name in self._prices:
                return self._prices[name]
            best = max((known for known in self._prices if name.startswith(known + "-")), key=len, default=None)
            if best:
                return self._prices[best]
        return None

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> float:
        """The cost of one call; 0.0 for an unpriced model."""
        pair = self.price(model)
        if pair is None:
            return 0.0
        return (input_tokens * pair[0] + output_tokens * pair[1]) / 1_000_000


def note_unpriced(model: str, *, capped: bool) -> None:
    """Name a model with no known price, once per process.

    A warning when a cost cap is set (the cap cannot see this model's spend); otherwise an INFO record, so
    that runs on local models (which have no price) stay silent unless logging is configured.
    """
    with _warned_lock:
        if model in _warned:
            return
        _warned.add(model)
    if capped:
        logger.warning(
            "no price known for model %r: its calls cost 0, so max_cost cannot stop them; "
            "pass prices={%r: (usd_per_mtok_in, usd_per_mtok_out)} to RLM or call rlm_adapters.register_price",
            model,
            model,
        )
    else:
        logger.info("no price known for model %r: its tokens are counted, its cost is 0", model)
