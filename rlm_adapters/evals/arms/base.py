"""What every arm takes and gives: the shared `ModelSetup` and one `ArmOutcome` per instance."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from rlm_adapters.core import PriceTable
from rlm_adapters.core.cache import CallCache, ScopedCache
from rlm_adapters.core.lm import ModelClient, make_client, owns_client
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.tasks.base import Instance

ArmName = Literal["direct", "compaction", "rlm", "routed", "rlm-depth0", "rlm-depth2", "rlms"]
ARM_NAMES: tuple[ArmName, ...] = ("direct", "compaction", "rlm", "routed", "rlm-depth0", "rlm-depth2", "rlms")
Status = Literal["ok", "context_limit", "error", "max_iterations", "budget", "timeout", "cancelled"]


@dataclass
class ArmOutcome:
    """What one arm produced for one instance."""

    answer: str
    status: Status
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    calls: int = 0
    seconds: float = 0.0
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelSetup:
    """The model configuration every arm uses.

    Attributes:
        root: The root model (answers in ``direct``; writes code in the RLM arms).
        sub: The sub-model (`llm_query` in the RLM arms); None means the root model.
        compactor: The model that writes compaction notes (``--compaction-model``; the paper used GPT-5-nano
            under GPT-5); None means the root model.
        environment: The RLM sandbox kind.
        context_window: The root model's window in tokens, when known: ``direct`` skips prompts over it and
            ``compaction`` fills it.
        compaction_tokens: An explicit compaction threshold in tokens, instead of the window.
        rlm_kwargs: Extra `RLM` settings (``max_iterations``, ``timeout``, ``max_cost``, ...).
        prices: Prices for the arms that do not price their own calls (``direct``, ``compaction`` and
            ``rlms``); the ``rlm`` arms use the engine's own table.
        owned: Clients this setup built and must close.
        cache: The call cache every arm but ``rlms`` looks its calls up in (``rlm eval`` keeps one in its
            output folder), so an instance killed mid-run resumes from its first unfinished call. A record's
            cost is what its calls cost when they were paid, replayed or not (``extra["cached_calls"]`` says
            how many were replayed), so reports stay comparable; its time is this run's.
    """

    root: ModelClient
    sub: ModelClient | None = None
    compactor: ModelClient | None = None
    environment: str = "subprocess"
    context_window: int | None = None
    compaction_tokens: int | None = None
    rlm_kwargs: dict[str, Any] = field(default_factory=dict)
    prices: PriceTable = field(default_factory=PriceTable)
    owned: list[ModelClient] = field(default_factory=list)
    cache: CallCache | None = None

    @classmethod
    def from_options(
        cls, options: dict[str, Any], *, compaction_options: dict[str, Any] | None = None, **settings: Any
    ) -> ModelSetup:
        """Build the clients once from `rlm_adapters.model_flags.model_options` output.

        Args:
            options: The root (and sub-) model options.
            compaction_options: ``model_options`` output for ``--compaction-model``, when one is given.
            settings: The other `ModelSetup` fields.
        """
        root = make_client(options["backend"], options.get("backend_kwargs"))
        owned = [root] if owns_client(options["backend"]) else []
        sub = None
        for backend, kwargs in zip(
            options.get("other_backends", []), options.get("other_backend_kwargs", []), strict=True
        ):
            sub = make_client(backend, kwargs)
            if owns_client(backend):
                owned.append(sub)
        compactor = None
        if compaction_options is not None:
            compactor = make_client(compaction_options["backend"], compaction_options.get("backend_kwargs"))
            if owns_client(compaction_options["backend"]):
                owned.append(compactor)
        return cls(root=root, sub=sub, compactor=compactor, owned=owned, **settings)

    @property
    def threshold(self) -> int:
        """Tokens a compaction step may fill: the explicit threshold, else the model's window.

        Raises:
            ConfigurationError: when neither is known.
        """
        if self.compaction_tokens is not None:
            return self.compaction_tokens
        if self.context_window is not None:
            return self.context_window
        raise ConfigurationError(
            f"compaction fills the model's window, and the window of {self.root.model_name!r} is not known: "
            "pass --context-window"
        )

    def cache_for(self, arm: str, instance: Instance, repeat: int = 0) -> CallCache | None:
        """The call cache of one (arm, instance, repeat): its own scope, so that instances stay independent
        samples where their requests coincide (the same sub-call prompt in two instances is two calls), and so
        do the repeats of one instance (``--repeats``: each is a new sample, and resuming one is still free).
        The first repeat keeps the scope runs without repeats had, so their cached calls still replay."""
        if self.cache is None:
            return None
        again = f"|repeat {repeat}" if repeat else ""
        return ScopedCache(self.cache, f"{arm}|{instance.id}|{instance.digest()[:16]}{again}")

    def settings(self) -> dict[str, Any]:
        """Every model setting that can change a result, for result keys and reports."""
        return {
            "model": self.root.model_name,
            "sub_model": self.sub.model_name if self.sub else None,
            "compaction_model": (self.compactor or self.root).model_name,
            "context_window": self.context_window,
            "compaction_tokens": self.compaction_tokens,
            "environment": self.environment,
            "rlm": dict(sorted(self.rlm_kwargs.items())),
        }

    async def aclose(self) -> None:
        """Close the clients this setup built, and its call cache."""
        for client in self.owned:
            await client.aclose()
        if self.cache is not None:
            await asyncio.to_thread(self.cache.close)  # ends its thread once the queued writes are committed
