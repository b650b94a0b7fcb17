"""One budget for a whole run tree: tokens, cost, wall time and sub-call count.

A model call asks the budget *after* it passed its model's concurrency semaphore and *before* it is sent
(`reserve`): it holds its input estimate plus its output, bounded by the model's ``max_tokens``, and the
cost of both. It reports what it really used afterwards (`settle`) or gives the hold back (`release`).
So 200 calls started at once cannot all slip under a limit together:

- a call whose input alone no longer fits is refused (`BudgetExhausted`; the run ends with ``budget``);
- a call that fits only once calls still in flight have settled waits for them, then checks again;
- a call's output hold is cut to what is left, so the limit can be passed by at most the part of one
  reply beyond that cut (a provider is not told the remaining budget; ``max_tokens`` is its own setting).

The budget lives on one event loop (the run's) and needs no lock: every caller is a coroutine there.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NoReturn

from rlm_adapters.core.pricing import PriceTable, note_unpriced
from rlm_adapters.core.sandbox import BudgetSpent
from rlm_adapters.core.tokens import estimate_tokens as estimate_tokens  # re-exported: its home until core.tokens
from rlm_adapters.core.usage import ModelUsage, Role, UsageSummary

MIN_TOKEN_LIMIT = 50
DEFAULT_TOKEN_LIMIT = 1_000_000  # of root tokens, and of sub tokens, when the user sets none
WARNING_FRACTION = 0.8
# The output a call may produce when its client does not say (no ``max_tokens`` known).
DEFAULT_OUTPUT_RESERVE = 4096

Resource = Literal["root_tokens", "sub_tokens", "cost", "time", "sub_calls"]


@dataclass(frozen=True)
class Limits:
    """The caps of one run; None means unlimited."""

    max_root_tokens: int = DEFAULT_TOKEN_LIMIT
    max_sub_tokens: int = DEFAULT_TOKEN_LIMIT
    max_cost: float | None = None
    timeout: float | None = None
    max_sub_calls: int | None = None

    def validate(self) -> None:
        """Raise `ValueError` naming the parameter when a limit is below its minimum."""
        for name in ("max_root_tokens", "max_sub_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < MIN_TOKEN_LIMIT:
                raise ValueError(
                    f"{name}={value!r} is below the minimum of {MIN_TOKEN_LIMIT} tokens; "
                    f"pass an integer >= {MIN_TOKEN_LIMIT} (default {DEFAULT_TOKEN_LIMIT:,})"
                )
        if self.max_cost is not None and not (self.max_cost > 0):
            raise ValueError(f"max_cost={self.max_cost!r} must be > 0 (or None for no cap)")
        if self.timeout is not None and not (self.timeout > 0):
            raise ValueError(f"timeout={self.timeout!r} must be > 0 seconds (or None for no limit)")
        if self.max_sub_calls is not None and self.max_sub_calls < 0:
            raise ValueError(f"max_sub_calls={self.max_sub_calls!r} must be >= 0 (or None)")


class BudgetExhausted(BudgetSpent):
    """Raised inside the engine when a call would exceed the budget.

    A `BudgetSpent`, so that a sandbox passes it to model code as the handler contract says.

    Attributes:
        resource: The limit that was reached.
        used: How much of it was used (tokens, USD, seconds or calls).
        limit: The limit itself (None when the resource has none).
    """

    def __init__(self, resource: Resource, message: str, used: float = 0.0, limit: float | None = None) -> None:
        super().__init__(message)
        self.resource = resource
        self.used = used
        self.limit = limit

    @property
    def finish_reason(self) -> Literal["budget", "timeout"]:
        """`timeout` for the wall clock, `budget` for everything else."""
        return "timeout" if self.resource == "time" else "budget"


@dataclass(frozen=True)
class BudgetWarning:
    """A resource crossed its warning threshold (`WARNING_FRACTION` of its limit)."""

    resource: Resource
    used: float
    limit: float

    @property
    def message(self) -> str:
        """The warning in words."""
        return f"{self.resource} at {self.used:,.4g} of {self.limit:,.4g}"


@dataclass(frozen=True)
class Reservation:
    """What one call in flight holds: give it back to `Budget.settle` or `Budget.release`."""

    role: Role
    tokens: int
    cost: float


def _count(value: object) -> int:
    """A provider's token count as a non-negative int (a negative or odd one counts as 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


class Budget:
    """The shared budget of one run and every nested RLM in it, on the run's event loop."""

    def __init__(
        self,
        limits: Limits,
        prices: PriceTable | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.prices = prices or PriceTable()
        self.usage = UsageSummary()
        self._clock = clock
        self._started = clock()
        self._reserved_tokens: dict[Role, int] = {"root": 0, "sub": 0}
        self._reserved_cost = 0.0
        self._in_flight = 0  # counted, not inferred from the sums: float cost sums drift
        self._sub_calls_started = 0
        self._warned: set[Resource] = set()
        self._settled = asyncio.Event()
        self.exhausted: BudgetExhausted | None = None

    # -- time -------------------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        """Seconds since the run started."""
        return self._clock() - self._started

    def remaining_time(self) -> float | None:
        """Seconds left before the run's timeout, or None without one."""
        if self.limits.timeout is None:
            return None
        return max(0.0, self.limits.timeout - self.elapsed)

    def check_time(self) -> None:
        """Raise `BudgetExhausted` when the wall-clock limit has passed."""
        remaining = self.remaining_time()
        if remaining is not None and remaining <= 0:
            self.expire_time()

    def expire_time(self, reason: str | None = None) -> NoReturn:
        """Mark the wall-clock limit as reached and raise `BudgetExhausted`.

        Args:
            reason: Why the run cannot go on before its deadline, when it has not passed yet.
        """
        timeout = self.limits.timeout
        message = f"the run's timeout of {timeout or 0:g} s has passed"
        if reason is not None:
            message = f"the run's timeout of {timeout or 0:g} s leaves too little time: {reason}"
        self._fail("time", message, self.elapsed, timeout)

    # -- calls ------------------------------------------------------------------------------------
    def check_open(self, role: Role) -> None:
        """Raise `BudgetExhausted` when nothing more can be spent for `role` (used before a sandbox starts)."""
        self.check_time()
        if self.exhausted is not None:
            raise self.exhausted
        limit = self._token_limit(role)
        used = self._role_usage(role).total_tokens
        if used >= limit:
            self._fail(f"{role}_tokens", f"max_{role}_tokens={limit:,} reached ({used:,} used)", used, limit)  # type: ignore[arg-type]
        max_cost = self.limits.max_cost
        if max_cost is not None and self.usage.total_cost >= max_cost:
            spent = self.usage.total_cost
            self._fail("cost", f"max_cost={max_cost:g} reached (spent {spent:.4f})", spent, max_cost)

    def start_sub_call(self) -> None:
        """Count one call from the REPL (a prompt of `llm_query*` or a nested run of `rlm_query*`).

        Raises:
            BudgetExhausted: when `max_sub_calls` calls were started already, or the budget is spent.
        """
        self.check_open("sub")
        cap = self.limits.max_sub_calls
        if cap is not None and self._sub_calls_started >= cap:
            self._fail("sub_calls", f"max_sub_calls={cap} reached", self._sub_calls_started, cap)
        self._sub_calls_started += 1

    async def reserve(self, role: Role, model: str, input_tokens: int, max_output_tokens: int | None) -> Reservation:
        """Hold a call's input estimate, its bounded output and their cost until it settles.

        Args:
            role: ``root`` for the top-level root model, ``sub`` for every other call.
            model: The model the call goes to (for its price).
            input_tokens: The estimated input tokens.
            max_output_tokens: The most the reply may hold (the client's ``max_tokens``), or None.

        Raises:
            BudgetExhausted: when the call's input no longer fits under a limit.
        """
        output = DEFAULT_OUTPUT_RESERVE if max_output_tokens is None else max(0, max_output_tokens)
        while True:
            self.check_time()
            if self.exhausted is not None:
                raise self.exhausted
            held = self._plan(role, model, input_tokens, output)
            if held is not None:
                self._reserved_tokens[role] += held.tokens
                self._reserved_cost += held.cost
                self._in_flight += 1
                return held
            # It fits once calls in flight have settled: wait for the next settlement, then look again.
            await self._settled.wait()

    def release(self, reservation: Reservation) -> None:
        """Give back the hold of a call that was never completed."""
        self._unhold(reservation)

    def settle(
        self,
        reservation: Reservation,
        model: str,
        input_tokens: int,
        output_tokens: int,
        cost: float | None = None,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> tuple[float, list[BudgetWarning]]:
        """Record a finished call and release its hold.

        Args:
            reservation: What `reserve` returned for the call.
            model: The model the call was accounted under.
            input_tokens: Prompt tokens, as reported (the prompt cache's reads and writes included).
            output_tokens: Completion tokens, as reported.
            cost: The provider's own figure when it reported one; otherwise the price table's.
            cache_read_tokens: Of the input, what the provider's prompt cache served (its cache read rate).
            cache_write_tokens: Of the input, what was written to that cache (its cache write rate).

        Returns:
            The call's cost and the warnings it caused (each resource warns once), for the caller to emit.
        """
        input_tokens, output_tokens = _count(input_tokens), _count(output_tokens)
        read, write = _count(cache_read_tokens), _count(cache_write_tokens)
        if cost is None:
            cost = self.prices.cost(model, input_tokens, output_tokens, read, write)
            if self.prices.price(model) is None:
                note_unpriced(model, capped=self.limits.max_cost is not None)
        self.usage.record(
            reservation.role, model, input_tokens, output_tokens, cost, cache_read_tokens=read, cache_write_tokens=write
        )
        self._unhold(reservation)
        return cost, self._new_warnings()

    @property
    def sub_calls_started(self) -> int:
        """How many calls from the REPL were allowed to start so far."""
        return self._sub_calls_started

    # -- internals --------------------------------------------------------------------------------
    def _plan(self, role: Role, model: str, input_tokens: int, output: int) -> Reservation | None:
        """The hold for a call that may go now; None when it must wait. Raises when it never can."""
        limit = self._token_limit(role)
        used = self._role_usage(role).total_tokens
        if used + input_tokens >= limit:
            self._fail(
                f"{role}_tokens",  # type: ignore[arg-type]
                f"max_{role}_tokens={limit:,} reached ({used:,} used, the next call needs about "
                f"{input_tokens:,} input tokens)",
                used,
                limit,
            )
        tokens = input_tokens + min(output, limit - used - input_tokens)
        fits = used + self._reserved_tokens[role] + tokens <= limit
        cost = 0.0
        max_cost = self.limits.max_cost
        if max_cost is not None:
            spent = self.usage.total_cost
            input_cost = self.prices.cost(model, input_tokens, 0)
            if spent + input_cost >= max_cost:
                self._fail(
                    "cost",
                    f"max_cost={max_cost:g} reached (spent {spent:.4f}, the next call's input costs about "
                    f"{input_cost:.4f})",
                    spent,
                    max_cost,
                )
            cost = input_cost + min(self.prices.cost(model, 0, output), max_cost - spent - input_cost)
            fits = fits and spent + self._reserved_cost + cost <= max_cost * (1 + 1e-9)
        # With nothing in flight there is nothing to wait for: what fits by actual use goes.
        return Reservation(role, tokens, cost) if fits or self._in_flight == 0 else None

    def _unhold(self, reservation: Reservation) -> None:
        self._reserved_tokens[reservation.role] -= reservation.tokens
        self._in_flight -= 1
        self._reserved_cost = 0.0 if self._in_flight == 0 else self._reserved_cost - reservation.cost
        self._wake()

    def _wake(self) -> None:
        self._settled.set()
        self._settled = asyncio.Event()

    def _token_limit(self, role: Role) -> int:
        return self.limits.max_root_tokens if role == "root" else self.limits.max_sub_tokens

    def _role_usage(self, role: Role) -> ModelUsage:
        return self.usage.root if role == "root" else self.usage.sub

    def _new_warnings(self) -> list[BudgetWarning]:
        checks: list[tuple[Resource, float, float | None]] = [
            ("root_tokens", self.usage.root.total_tokens, self.limits.max_root_tokens),
            ("sub_tokens", self.usage.sub.total_tokens, self.limits.max_sub_tokens),
            ("cost", self.usage.total_cost, self.limits.max_cost),
        ]
        out: list[BudgetWarning] = []
        for resource, used, limit in checks:
            if limit and used >= WARNING_FRACTION * limit and resource not in self._warned:
                self._warned.add(resource)
                out.append(BudgetWarning(resource, float(used), float(limit)))
        return out

    def _fail(self, resource: Resource, message: str, used: float, limit: float | None) -> NoReturn:
        if self.exhausted is None:
            self.exhausted = BudgetExhausted(resource, message, float(used), limit)
        raise self.exhausted
