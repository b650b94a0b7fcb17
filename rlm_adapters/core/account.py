"""`Account`: who pays for a run's model calls beyond the run itself, such as a key of a shared store.

The run's `Budget` is the one seam: before a call is sent, once the run's own limits let it go, the budget asks
the account to `hold` the call's worst-case price (its input and its whole output bound at the model's price); a
refusal ends the run at the budget as ``max_cost`` does (resource ``key_budget``, finish reason ``budget``, the
partial answer kept). When the call returns, or is cut mid-flight (its tokens billed), the budget `settle`s the
hold with what the call really used; a call that never went, or was replayed from the call cache, is `release`d.

`settle` and `release` are called from the budget's synchronous bookkeeping and must not block the run's loop:
an account that writes to a database queues the write and finishes it in `flush`, which the run awaits before it
returns, so the spend of every call is recorded once the run's result exists.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class AccountRefused(Exception):
    """The account cannot pay for the next call (its budget would be crossed).

    Attributes:
        spent: What the account spent in its current period (USD).
        budget: Its budget for the period (USD).
        held: What its other calls in flight hold (USD): the call might fit once they settle.
    """

    def __init__(self, message: str, spent: float, budget: float, held: float = 0.0) -> None:
        super().__init__(message)
        self.spent = spent
        self.budget = budget
        self.held = held


@runtime_checkable
class Account(Protocol):
    """Who else pays for a run's calls: holds each call's worst-case price, then settles what it cost."""

    @property
    def capped(self) -> bool:
        """Whether the account has a money budget (then a call to a model without a price is refused)."""
        ...

    @property
    def name(self) -> str:
        """The account as messages name it (``key 'alice'``)."""
        ...

    async def hold(self, model: str, dollars: float) -> object:
        """Hold `dollars` for one call to `model`; the returned hold goes back to `settle` or `release`.

        Raises:
            AccountRefused: the hold would cross the account's budget.
        """
        ...

    def settle(
        self, hold: object, model: str, input_tokens: int, output_tokens: int, dollars: float, *, cut: bool
    ) -> None:
        """Record one call's real use (`cut`: ended before its reply was whole) and drop its hold (never blocks)."""
        ...

    def release(self, hold: object) -> None:
        """Drop the hold of a call that was never paid for (never blocks)."""
        ...

    async def flush(self) -> None:
        """Wait until every `settle` and `release` so far is recorded."""
        ...
