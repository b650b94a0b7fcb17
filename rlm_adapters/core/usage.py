"""Token and cost accounting: what a run used, per role and per model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["root", "sub"]


@dataclass
class ModelUsage:
    """Calls, tokens and cost of a group of model calls.

    A call replayed from the engine's call cache counts its calls and tokens as the original did (so limits
    stop a resumed run where they stopped the original) and costs nothing; `cached_calls` and `cached_tokens`
    say how many of them were replays.

    `input_tokens` counts every prompt token, including those the provider's prompt cache served
    (`cache_read_tokens`) or stored (`cache_write_tokens`); those two are priced at the provider's cache
    rates (`core/pricing.py`). They are the providers' prompt caches, not the engine's call cache.

    `cut_calls` are calls ended before their reply was whole (a timeout, a spent budget, a cancellation, a
    dropped connection): counted with their prompt and the output that had arrived, since a provider bills
    that work too (docs/durable-runs.md says which figures are exact and which are estimates).
    """

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    cached_calls: int = 0
    cached_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cut_calls: int = 0
    truncated_replies: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def add(
        self,
        input_tokens: int,
        output_tokens: int,
        cost: float,
        calls: int = 1,
        *,
        cached: bool = False,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cut: bool = False,
        truncated: bool = False,
    ) -> None:
        """Count one more call (or `calls` more) with these tokens and cost (`cached`: replayed ones; `cut`:
        ended before its reply was whole; `truncated`: its reply was cut at its token cap)."""
        self.calls += calls
        self.cut_calls += calls if cut else 0
        self.truncated_replies += calls if truncated else 0
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost += cost
        if cached:
            self.cached_calls += calls
            self.cached_tokens += input_tokens + output_tokens
        self.cache_read_tokens += cache_read_tokens
        self.cache_write_tokens += cache_write_tokens

    def add_usage(self, other: ModelUsage) -> None:
        """Count every call of `other` too."""
        self.add(
            other.input_tokens,
            other.output_tokens,
            other.cost,
            calls=other.calls,
            cache_read_tokens=other.cache_read_tokens,
            cache_write_tokens=other.cache_write_tokens,
        )
        self.cached_calls += other.cached_calls
        self.cached_tokens += other.cached_tokens
        self.cut_calls += other.cut_calls
        self.truncated_replies += other.truncated_replies

    def to_dict(self) -> dict[str, Any]:
        """The seeds' shape, ``{"calls", "input_tokens", "output_tokens", "cost"}``, plus ``cached_calls`` and
        ``cached_tokens`` when calls were replayed from the call cache, ``cache_read_tokens`` and
        ``cache_write_tokens`` when a provider's prompt cache served or stored any, and ``cut_calls`` when
        calls were cut before their reply was whole, ``truncated_replies`` when replies were cut at their token
        cap."""
        data: dict[str, Any] = {
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": round(self.cost, 8),
        }
        if self.cached_calls:
            data["cached_calls"] = self.cached_calls
            data["cached_tokens"] = self.cached_tokens
        if self.cache_read_tokens or self.cache_write_tokens:
            data["cache_read_tokens"] = self.cache_read_tokens
            data["cache_write_tokens"] = self.cache_write_tokens
        if self.cut_calls:
            data["cut_calls"] = self.cut_calls
        if self.truncated_replies:
            data["truncated_replies"] = self.truncated_replies
        return data


@dataclass
class UsageSummary:
    """Usage of a whole run, every depth counted exactly once.

    `root` is the top-level root model; `sub` is everything else (plain sub-calls and the
    root calls of nested RLMs); `by_model` splits the total by model name.
    """

    root: ModelUsage = field(default_factory=ModelUsage)
    sub: ModelUsage = field(default_factory=ModelUsage)
    by_model: dict[str, ModelUsage] = field(default_factory=dict)

    @property
    def total(self) -> ModelUsage:
        """Root plus sub usage."""
        out = ModelUsage()
        for part in (self.root, self.sub):
            out.add_usage(part)
        return out

    @property
    def total_cost(self) -> float:
        """Money spent by the run, in the price table's currency (USD by default)."""
        return self.root.cost + self.sub.cost

    def record(
        self,
        role: Role,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float,
        *,
        cached: bool = False,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cut: bool = False,
        truncated: bool = False,
    ) -> None:
        """Count one finished model call (its input tokens include the prompt cache's reads and writes;
        `cached`: replayed from the call cache; `cut`: ended before its reply was whole; `truncated`: its reply
        was cut at its token cap)."""
        cache: dict[str, Any] = {
            "cache_read_tokens": cache_read_tokens,
            "cache_write_tokens": cache_write_tokens,
            "cut": cut,
            "truncated": truncated,
        }
        (self.root if role == "root" else self.sub).add(input_tokens, output_tokens, cost, cached=cached, **cache)
        self.by_model.setdefault(model, ModelUsage()).add(input_tokens, output_tokens, cost, cached=cached, **cache)

    @property
    def total_input_tokens(self) -> int:
        """Input tokens of every call (the reference's name)."""
        return self.root.input_tokens + self.sub.input_tokens

    @property
    def total_output_tokens(self) -> int:
        """Output tokens of every call (the reference's name)."""
        return self.root.output_tokens + self.sub.output_tokens

    @property
    def model_usage_summaries(self) -> dict[str, dict[str, Any]]:
        """Usage per model in the reference RLM's shape:
        ``{name: {"total_calls", "total_input_tokens", "total_output_tokens", "total_cost"}}``."""
        return {
            name: {
                "total_calls": usage.calls,
                "total_input_tokens": usage.input_tokens,
                "total_output_tokens": usage.output_tokens,
                "total_cost": round(usage.cost, 8),
            }
            for name, usage in sorted(self.by_model.items())
        }

    def to_dict(self) -> dict[str, Any]:
        """``{"total": U, "root": U, "sub": U, "by_model": {name: U}}`` plus the reference's
        ``model_usage_summaries`` and ``total_cost``."""
        return {
            "total": self.total.to_dict(),
            "root": self.root.to_dict(),
            "sub": self.sub.to_dict(),
            "by_model": {name: usage.to_dict() for name, usage in sorted(self.by_model.items())},
            "model_usage_summaries": self.model_usage_summaries,
            "total_cost": round(self.total_cost, 8),
        }
