"""Prices per million tokens, used to count and cap a run's cost.

The table is deliberately small and user-extendable: prices change, and a wrong built-in price is worse
than an explicit one. Pass ``prices={"my-model": (input_usd_per_mtok, output_usd_per_mtok)}`` to `RLM`
or call `register_price`. A model with no known price counts its tokens, costs 0, and is named once per
process (logger ``rlm_adapters.pricing``: a warning when a cost cap is set, else at INFO).

Names are matched as providers spell them: exactly, then with a gateway prefix removed (``openai/gpt-5``,
``models/gemini-2.5-flash``), a Bedrock region and vendor prefix and version suffix removed
(``us.anthropic.claude-sonnet-4-5-20250929-v1:0``), and a dated suffix removed (``gpt-5-mini-2025-08-07``).

Built-in prices are the providers' list prices for standard (non-batch) text tokens as published in November
2025 (no test can fetch them: check them before relying on ``max_cost``); Gemini 2.5 Pro's are those of
prompts up to 200k tokens.

Prompt-cache rates: input tokens a provider's prompt cache served (``cache_read``) or stored (``cache_write``)
are priced at the provider's cache rates: Anthropic (also on Bedrock) reads at 0.1x the input price and
writes at 1.25x (the 5-minute cache), OpenAI's cached input at its listed rate (writes cost the input
price), Gemini's implicit cache at its listed rate. A model priced without cache rates (a price pair given
by the user) pays the input price for both, so a cap never undercounts; give four numbers,
``(input, output, cache_read, cache_write)``, to say otherwise.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Iterator, Mapping

PricePair = tuple[float, float]
# (input, output) or (input, output, cache_read, cache_write), USD per million tokens.
Price = tuple[float, float] | tuple[float, float, float, float]
CachePair = tuple[float, float]

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

# Anthropic's cache on every Claude model: reads 0.1x the input price, writes (5-minute TTL) 1.25x.
ANTHROPIC_CACHE = (0.1, 1.25)


def _ratio(model: str, read: float, write: float = 1.0) -> CachePair:
    price = DEFAULT_PRICES[model][0]
    return (round(price * read, 6), round(price * write, 6))


# (cache read, cache write) USD per million tokens.
DEFAULT_CACHE_PRICES: dict[str, CachePair] = {
    # OpenAI's listed cached-input prices; a cache write is billed as plain input.
    "gpt-5.1": (0.125, 1.25),
    "gpt-5": (0.125, 1.25),
    "gpt-5-mini": (0.025, 0.25),
    "gpt-5-nano": (0.005, 0.05),
    "gpt-4.1": (0.50, 2.0),
    "gpt-4.1-mini": (0.10, 0.40),
    "gpt-4.1-nano": (0.025, 0.10),
    "gpt-4o": (1.25, 2.5),
    "gpt-4o-mini": (0.075, 0.15),
    **{name: _ratio(name, *ANTHROPIC_CACHE) for name in DEFAULT_PRICES if name.startswith("claude-")},
    # Gemini's implicit cache (storage of explicit caches is not a token price and is not counted).
    "gemini-3-pro-preview": _ratio("gemini-3-pro-preview", 0.1),
    "gemini-2.5-pro": _ratio("gemini-2.5-pro", 0.1),
    "gemini-2.5-flash": _ratio("gemini-2.5-flash", 0.1),
    "gemini-2.5-flash-lite": _ratio("gemini-2.5-flash-lite", 0.1),
    "gemini-2.0-flash": _ratio("gemini-2.0-flash", 0.25),
    # Amazon Nova on Bedrock: cache reads at a 75% discount, writes at no extra charge.
    **{name: _ratio(name, 0.25) for name in DEFAULT_PRICES if name.startswith("nova-")},
}

_registered: dict[str, Price] = {}
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


def register_price(
    model: str,
    input_per_mtok: float,
    output_per_mtok: float,
    cache_read_per_mtok: float | None = None,
    cache_write_per_mtok: float | None = None,
) -> None:
    """Add or override the price of `model` for every run in this process.

    Args:
        model: The model's name.
        input_per_mtok: USD per million input tokens.
        output_per_mtok: USD per million output tokens.
        cache_read_per_mtok: USD per million input tokens served by the provider's prompt cache (None: the
            input price).
        cache_write_per_mtok: USD per million input tokens written to it (None: the input price).
    """
    given = (input_per_mtok, output_per_mtok, cache_read_per_mtok, cache_write_per_mtok)
    if any(p is not None and p < 0 for p in given):
        raise ValueError(f"prices must be >= 0, got {given!r} for {model!r}")
    if cache_read_per_mtok is None and cache_write_per_mtok is None:
        _registered[model] = (input_per_mtok, output_per_mtok)
    else:
        read = input_per_mtok if cache_read_per_mtok is None else cache_read_per_mtok
        write = input_per_mtok if cache_write_per_mtok is None else cache_write_per_mtok
        _registered[model] = (input_per_mtok, output_per_mtok, read, write)


def forget_prices() -> None:
    """Forget the prices `register_price` added and which unpriced models were already named (tests)."""
    with _warned_lock:
        _warned.clear()
    _registered.clear()


class PriceTable:
    """Looks up a model's price: run-level overrides, then registered, then built-in prices.

    A dated model name (``gpt-5-mini-2025-08-07``) falls back to its longest priced prefix.
    """

    def __init__(self, overrides: Mapping[str, Price] | None = None) -> None:
        self._prices: dict[str, Price] = {**DEFAULT_PRICES, **_registered, **(overrides or {})}
        # Built-in cache rates apply only while the built-in (input, output) price does.
        self._cache: dict[str, CachePair] = {
            name: pair for name, pair in DEFAULT_CACHE_PRICES.items() if self._prices.get(name) == DEFAULT_PRICES[name]
        }
        for name, price in self._prices.items():
            if len(price) == 4:
                self._cache[name] = (price[2], price[3])
        self._entries: dict[str, str | None] = {}  # model -> its entry: every call of a run looks it up

    def _entry(self, model: str) -> str | None:
        """The table's name for `model` (exact, without prefixes, or its longest priced prefix)."""
        if model not in self._entries:
            self._entries[model] = self._find(model)
        return self._entries[model]

    def _find(self, model: str) -> str | None:
        for name in candidate_names(model):
            if name in self._prices:
                return name
            best = max((known for known in self._prices if name.startswith(known + "-")), key=len, default=None)
            if best:
                return best
        return None

    def price(self, model: str) -> PricePair | None:
        """The (input, output) USD per million tokens of `model`, or None when unknown."""
        name = self._entry(model)
        if name is None:
            return None
        price = self._prices[name]
        return (price[0], price[1])

    def cache_price(self, model: str) -> CachePair | None:
        """The (cache read, cache write) USD per million input tokens of `model`, or None when unknown.

        A priced model with no cache rates of its own pays its input price for both.
        """
        name = self._entry(model)
        if name is None:
            return None
        return self._cache.get(name, (self._prices[name][0], self._prices[name][0]))

    def cost(
        self,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """The cost of one call; 0.0 for an unpriced model.

        Args:
            model: The model the call was accounted under.
            input_tokens: Every prompt token, those the prompt cache read or wrote included.
            output_tokens: Completion tokens.
            cache_read_tokens: Of `input_tokens`, those served by the provider's prompt cache.
            cache_write_tokens: Of `input_tokens`, those written to it.
        """
        pair = self.price(model)
        if pair is None:
            return 0.0
        cache = self.cache_price(model)
        read, write = cache if cache is not None else (pair[0], pair[0])
        cached = cache_read_tokens + cache_write_tokens
        # A provider reporting more cached tokens than input tokens: the cached counts are the bill.
        plain = max(0, input_tokens - cached)
        return (plain * pair[0] + cache_read_tokens * read + cache_write_tokens * write + output_tokens * pair[1]) / (
            1_000_000
        )


def as_price(value: tuple[float, ...] | list[float]) -> Price:
    """A checked price as floats: two numbers (input, output) or four (with cache read and write)."""
    numbers = [float(v) for v in value]
    if len(numbers) == 4:
        return (numbers[0], numbers[1], numbers[2], numbers[3])
    return (numbers[0], numbers[1])


def unpriced_models(models: Iterable[str], prices: Mapping[str, Price] | None = None) -> list[str]:
    """The models among `models` with no known price (`prices` over the registered and built-in ones) that
    this process has not named yet; each is marked named, so the engine's own warning (worded for `RLM`'s
    arguments) does not repeat what a command already said in its flags' words."""
    table = PriceTable(prices)
    unknown = list(dict.fromkeys(m for m in models if table.price(m) is None))
    with _warned_lock:
        fresh = [m for m in unknown if m not in _warned]
        _warned.update(fresh)
    return fresh


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
