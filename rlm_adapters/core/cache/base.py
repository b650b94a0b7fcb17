"""The call cache's protocol: a store of model replies by request key, and what one entry holds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rlm_adapters.core.budget_limits import token_count as _count
from rlm_adapters.core.lm import LMResponse


@dataclass(frozen=True)
class CachedReply:
    """One stored reply: what the call returned and what it cost when it was paid.

    Attributes:
        text: The reply text.
        input_tokens: Prompt tokens, as the provider reported them.
        output_tokens: Completion tokens.
        model: The model the call was accounted under.
        cost: USD the original call cost (a replay costs nothing, but counts this toward ``max_cost``, so that
            a resumed run stops where the original would have).
    """

    text: str
    input_tokens: int
    output_tokens: int
    model: str
    cost: float

    @classmethod
    def of(cls, response: LMResponse, cost: float) -> CachedReply:
        """The entry for a reply that was just paid for (a provider's odd counts stored as the budget read them)."""
        paid = float(cost) if isinstance(cost, int | float) and math.isfinite(cost) and cost > 0 else 0.0
        return cls(response.text, _count(response.input_tokens), _count(response.output_tokens), response.model, paid)

    @classmethod
    def checked(cls, text: Any, input_tokens: Any, output_tokens: Any, model: Any, cost: Any) -> CachedReply | None:
        """An entry from stored values, or None when they are not what this library writes."""
        counts_ok = all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (input_tokens, output_tokens)
        )
        cost_ok = isinstance(cost, int | float) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0
        if not (isinstance(text, str) and isinstance(model, str) and counts_ok and cost_ok):
            return None
        return cls(text, input_tokens, output_tokens, model, float(cost))

    def usage(self) -> tuple[str, int, int, float]:
        """``(model, input_tokens, output_tokens, cost)``, as `Budget.replay` takes them."""
        return self.model, self.input_tokens, self.output_tokens, self.cost

    def response(self) -> LMResponse:
        """The reply as a model client would give it, marked as replayed."""
        return LMResponse(self.text, self.input_tokens, self.output_tokens, self.model, cached=True)


@runtime_checkable
class CallCache(Protocol):
    """A store of model replies by request key (`SQLiteCallCache` is the default one).

    Keys are opaque strings the engine makes (a digest of the request and its occurrence in the run);
    a store never needs to read them. Implementations must be safe to use from several event loops and
    threads at once, and should make a `put` durable before it returns.
    """

    async def get(self, key: str) -> CachedReply | None:
        """The reply stored under `key`, or None."""
        ...

    async def put(self, key: str, reply: CachedReply) -> CachedReply:
        """Store `reply` under `key` unless one is stored already; return the one stored (the first wins)."""
        ...

    def close(self) -> None:
        """Release the store's resources (the engine calls it only for a store it opened from a path)."""
        ...


class ScopedCache:
    """A view of a store whose keys are kept apart from every other scope's.

    The same request sent in two scopes is two calls: an evaluation gives each (arm, instance) its own, so
    that instances stay independent samples even where their requests coincide, and a resumed instance
    still replays its own calls.

    Args:
        store: The store underneath (never closed by the view: it belongs to whoever made it).
        scope: The scope's name.
    """

    def __init__(self, store: CallCache, scope: str) -> None:
        self.store = store
        self.scope = scope

    async def get(self, key: str) -> CachedReply | None:
        """The reply stored under `key` in this scope, or None."""
        return await self.store.get(f"{self.scope}|{key}")

    async def put(self, key: str, reply: CachedReply) -> CachedReply:
        """Store `reply` under `key` in this scope (the first one wins); return the one stored."""
        return await self.store.put(f"{self.scope}|{key}", reply)

    def close(self) -> None:
        """Nothing: the store underneath is its maker's to close."""
