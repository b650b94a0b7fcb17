"""One budget for a whole run tree: tokens, cost, wall time and sub-call count.

A model call asks the budget *after* it passed its model's concurrency semaphore and *before* it is sent
(`reserve`): it holds its input estimate plus its output, bounded by the model's ``max_tokens``, and the
cost of both. It reports what it really used afterwards (`settle`) or gives the hold back (`release`).
So 200 calls started at once cannot all slip under a limit together:

- a call whose input alone no longer fits is refused (`BudgetExhausted`; the run ends with ``budget``);
- a call that fits only once calls still in flight have settled waits for them, then checks again;
- a call's output hold is cut to what is left, so the limit can be passed by at most the part of one
  reply beyond that cut (a provider is not told the remaining budget; ``max_tokens`` is its own setting).

A call replayed from the call cache (`replay`) counts its tokens as the original did and costs nothing, but
its original cost counts toward ``max_cost`` (`spent`): a resumed run stops where the original would have.
A limit about to stop the run first asks the run's `on_budget` hook (`core/engine/budget_hook.py`), which may raise it.

A run may also have an `Account` (`core/account.py`: a key of a shared store) that pays for its calls:
`reserve` asks it to hold each call's worst-case price once the run's own limits let the call go, `settle` and
`release` pass on what the call used. Its refusal ends the run (``key_budget``); `on_budget` cannot raise it.

The budget lives on one event loop (the run's) and needs no lock: every caller is a coroutine there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any, NoReturn

from rlm_adapters.core.account import Account, AccountRefused
from rlm_adapters.core.budget_limits import (
    DEFAULT_OUTPUT_RESERVE,
    LIMIT_FIELDS,
    WARNING_FRACTION,
    Reservation,
    Resource,
)
from rlm_adapters.core.budget_limits import DEFAULT_TOKEN_LIMIT as DEFAULT_TOKEN_LIMIT
from rlm_adapters.core.budget_limits import MIN_TOKEN_LIMIT as MIN_TOKEN_LIMIT
from rlm_adapters.core.budget_limits import BudgetExhausted as BudgetExhausted
from rlm_adapters.core.budget_limits import BudgetWarning as BudgetWarning
from rlm_adapters.core.budget_limits import Limits as Limits
from rlm_adapters.core.budget_limits import token_count as _count
from rlm_adapters.core.engine.budget_hook import LimitAsker, OnBudget
from rlm_adapters.core.pricing import PriceTable, note_unpriced
from rlm_adapters.core.tokens import estimate_tokens as estimate_tokens  # re-exported: its home until core.tokens
from rlm_adapters.core.usage import ModelUsage, Role, UsageSummary


class Budget:
    """The shared budget of one run and every nested RLM in it, on the run's event loop.

    Args:
        limits: The caps.
        prices: Prices per model.
        clock: Seconds, for the timeout.
        on_budget: Asked before a limit stops the run; may raise it (`core/engine/budget_hook.py`).
        account: Who else pays for the run's calls (`core/account.py`), or None.
    """

    def __init__(
        self,
        limits: Limits,
        prices: PriceTable | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_budget: OnBudget | None = None,
        account: Account | None = None,
    ) -> None:
        self.limits = limits
        self.account = account
        self.asker = LimitAsker(on_budget, self.remaining_time) if on_budget is not None else None
        self.prices = prices or PriceTable()
        self.usage = UsageSummary()
        self._clock = clock
        self._started = clock()
        self._reserved_tokens: dict[Role, int] = {"root": 0, "sub": 0}
        self._reserved_cost = 0.0
        self._in_flight = 0  # counted, not inferred from the sums: float cost sums drift
        self._sub_calls_started = 0
        self._replayed_cost = 0.0  # what the calls replayed from the cache cost when they were paid
        self._replayed_unpriced: set[str] = set()  # models of replayed calls whose cost nobody knew
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
        self._exhaust(BudgetExhausted("time", message, self.elapsed, timeout))

    @property
    def replayed_cost(self) -> float:
        """What the calls replayed from the call cache cost when they were paid (this run paid nothing for them)."""
        return self._replayed_cost

    @property
    def replayed_unpriced(self) -> list[str]:
        """The models of replayed calls whose cost is unknown (no price, none reported), so that a resume note
        never calls them free."""
        return sorted(self._replayed_unpriced)

    @property
    def spent(self) -> float:
        """Money counted toward ``max_cost``: what this run paid, plus what its replayed calls cost originally."""
        return self.usage.total_cost + self._replayed_cost

    # -- calls ------------------------------------------------------------------------------------
    async def check_open(self, role: Role) -> None:
        """Raise `BudgetExhausted` when nothing more can be spent for `role` (used before a sandbox starts)."""
        while True:
            self.check_time()
            if self.exhausted is not None:
                raise self.exhausted
            try:
                return self._check_open(role)
            except BudgetExhausted as exc:
                await self._overrun(exc)

    def _check_open(self, role: Role) -> None:
        limit = self._token_limit(role)
        used = self._role_usage(role).total_tokens
        if used >= limit:
            self._fail(f"{role}_tokens", f"max_{role}_tokens={limit:,} reached ({used:,} used)", used, limit)  # type: ignore[arg-type]
        max_cost = self.limits.max_cost
        if max_cost is not None and self.spent >= max_cost:
            spent = self.spent
            self._fail("cost", f"max_cost={max_cost:g} reached (spent {spent:.4f})", spent, max_cost)

    async def start_sub_call(self) -> None:
        """Count one call from the REPL (a prompt of `llm_query*` or a nested run of `rlm_query*`).

        Raises:
            BudgetExhausted: when `max_sub_calls` calls were started already, or the budget is spent.
        """
        while True:
            await self.check_open("sub")
            cap = self.limits.max_sub_calls
            if cap is None or self._sub_calls_started < cap:
                self._sub_calls_started += 1
                return
            try:
                self._fail("sub_calls", f"max_sub_calls={cap} reached", self._sub_calls_started, cap)
            except BudgetExhausted as exc:
                await self._overrun(exc)

    async def reserve(
        self, role: Role, model: str, input_tokens: int, max_output_tokens: int | None, *, replay: bool = False
    ) -> Reservation:
        """Hold a call's input estimate, its bounded output and their cost until it settles.

        Args:
            role: ``root`` for the top-level root model, ``sub`` for every other call.
            model: The model the call goes to (for its price).
            input_tokens: The estimated input tokens.
            max_output_tokens: The most the reply may hold (the client's ``max_tokens``), or None.
            replay: The call is replayed from the call cache: its `account` holds nothing, as it pays nothing
                (a retry of a key's run is free on any replica, whatever is left of its budget).

        Raises:
            BudgetExhausted: when the call's input no longer fits under a limit.
        """
        output = DEFAULT_OUTPUT_RESERVE if max_output_tokens is None else max(0, max_output_tokens)
        while True:
            self.check_time()
            if self.exhausted is not None:
                raise self.exhausted
            try:
                held = self._plan(role, model, input_tokens, output)
            except BudgetExhausted as exc:
                await self._overrun(exc)
                continue
            if held is not None:
                self._reserved_tokens[role] += held.tokens
                self._reserved_cost += held.cost
                self._in_flight += 1
                if self.account is None or replay:
                    return held
                return await self._hold_account(held, model, input_tokens, output)
            # It fits once calls in flight have settled: wait for the next settlement, then look again.
            await self._settled.wait()

    async def _hold_account(self, held: Reservation, model: str, input_tokens: int, output: int) -> Reservation:
        """`held` with the account's hold of the call's worst-case price; the run ends when the account refuses."""
        assert self.account is not None
        account = self.account
        try:
            if account.capped and self.prices.price(model) is None:
                raise AccountRefused(
                    f"{account.name} has a budget and model {model!r} has no price, so its calls cannot be "
                    f"counted against it: give its price (--price {model}=INPUT,OUTPUT per million tokens)",
                    0.0,
                    0.0,
                )
            hold = await account.hold(model, self.prices.cost(model, input_tokens, output))
        except AccountRefused as exc:
            self._unhold(held)
            self._exhaust(BudgetExhausted("key_budget", str(exc), exc.spent, exc.budget))
        except BaseException:
            self._unhold(held)
            raise
        return dataclasses.replace(held, account_hold=hold)

    def release(self, reservation: Reservation) -> None:
        """Give back the hold of a call that was never completed."""
        if self.account is not None:
            self.account.release(reservation.account_hold)
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
        cut: bool = False,
        truncated: bool = False,
    ) -> tuple[float, list[BudgetWarning]]:
        """Record a finished call (or one `cut` before its reply was whole) and release its hold.

        Args:
            reservation: What `reserve` returned for the call.
            model: The model the call was accounted under.
            input_tokens: Prompt tokens, as reported (the prompt cache's reads and writes included).
            output_tokens: Completion tokens, as reported.
            cost: The provider's own figure when it reported one; otherwise the price table's.
            cache_read_tokens: Of the input, what the provider's prompt cache served (its cache read rate).
            cache_write_tokens: Of the input, what was written to that cache (its cache write rate).
            cut: The call ended before its reply was whole; its tokens are what had been produced by then.
            truncated: Its reply was cut at its token cap (``max_reply_tokens``).

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
            reservation.role,
            model,
            input_tokens,
            output_tokens,
            cost,
            cache_read_tokens=read,
            cache_write_tokens=write,
            cut=cut,
            truncated=truncated,
        )
        if self.account is not None:
            self.account.settle(reservation.account_hold, model, input_tokens, output_tokens, cost, cut=cut)
        self._unhold(reservation)
        return cost, self._new_warnings()

    def replay(
        self, reservation: Reservation, model: str, input_tokens: int, output_tokens: int, original_cost: float
    ) -> tuple[float, list[BudgetWarning]]:
        """Record a call replayed from the call cache and release its hold: its tokens count as the original's
        did, it costs nothing, and `original_cost` counts toward ``max_cost`` (`spent`).

        Returns:
            Its cost (0.0) and the warnings it caused.
        """
        input_tokens, output_tokens = _count(input_tokens), _count(output_tokens)
        self.usage.record(reservation.role, model, input_tokens, output_tokens, 0.0, cached=True)
        if math.isfinite(original_cost) and original_cost > 0:
            self._replayed_cost += original_cost
        elif self.prices.price(model) is None:
            self._replayed_unpriced.add(model)
        if self.account is not None and reservation.account_hold is not None:  # held when it was not yet a replay
            self.account.release(reservation.account_hold)
        self._unhold(reservation)
        return 0.0, self._new_warnings()

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
            spent = self.spent
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
            ("cost", self.spent, self.limits.max_cost),
        ]
        out: list[BudgetWarning] = []
        for resource, used, limit in checks:
            if limit and used >= WARNING_FRACTION * limit and resource not in self._warned:
                self._warned.add(resource)
                out.append(BudgetWarning(resource, float(used), float(limit)))
        return out

    def _fail(self, resource: Resource, message: str, used: float, limit: float | None) -> NoReturn:
        """Refuse one call; `_overrun` decides whether that ends the run."""
        raise BudgetExhausted(resource, message, float(used), limit)

    def _exhaust(self, exc: BudgetExhausted) -> NoReturn:
        """End the run's spending: every later call is refused with the first limit that ended it."""
        if self.exhausted is None:
            self.exhausted = exc
        raise self.exhausted

    async def _overrun(self, exc: BudgetExhausted) -> None:
        """A limit refused a call: return once `on_budget` raised it (the caller tries again), else end the run."""
        if self.exhausted is not None:
            raise self.exhausted
        name = LIMIT_FIELDS.get(exc.resource)
        if self.asker is None or name is None or exc.limit is None:
            self._exhaust(exc)
        field_name = name
        current: Callable[[], float | None] = lambda: getattr(self.limits, field_name)  # noqa: E731
        if not await self.asker.extend(field_name, exc.used, exc.limit, current, self._setter(field_name)):
            self.check_time()  # the question outlasted the run's timeout: that is what ended it
            self._exhaust(exc)

    def _setter(self, name: str) -> Callable[[float], None]:
        def apply(value: float) -> None:
            changes: dict[str, Any] = {name: value}
            self.limits = dataclasses.replace(self.limits, **changes)
            resource = next(r for r, field in LIMIT_FIELDS.items() if field == name)
            self._warned.discard(resource)  # it warns again near the new limit
            self._wake()  # calls waiting for room may fit now

        return apply
