"""One budget for a whole run tree: tokens, cost, wall time and sub-call count.

Every model call asks the budget *before* it is sent (`reserve`), with an estimate of its input
tokens, and reports what it really used afterwards (`commit`). Reservations make the check hold under
concurrency: 64 sub-calls started at once cannot all slip under the limit together.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rlm_adapters.core.pricing import PriceTable, note_unpriced
from rlm_adapters.core.usage import ModelUsage, Role, UsageSummary

MIN_TOKEN_LIMIT = 50
WARNING_FRACTION = 0.8

Resource = Literal["root_tokens", "sub_tokens", "cost", "time", "sub_calls"]


@dataclass(frozen=True)
class Limits:
    """The caps of one run; None means unlimited."""

    max_root_tokens: int = 1_000_000
    max_sub_tokens: int = 1_000_000
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
                    f"pass an integer >= {MIN_TOKEN_LIMIT} (default 1,000,000)"
                )
        if self.max_cost is not None and not (self.max_cost > 0):
            raise ValueError(f"max_cost={self.max_cost!r} must be > 0 (or None for no cap)")
        if self.timeout is not None and not (self.timeout > 0):
            raise ValueError(f"timeout={self.timeout!r} must be > 0 seconds (or None for no limit)")
        if self.max_sub_calls is not None and self.max_sub_calls < 0:
            raise ValueError(f"max_sub_calls={self.max_sub_calls!r} must be >= 0 (or None)")


class BudgetExhausted(Exception):
    """Raised inside the engine when a call would exceed the budget."""

    def __init__(self, resource: Resource, message: str) -> None:
        super().__init__(message)
        self.resource = resource

    @property
    def finish_reason(self) -> Literal["budget", "timeout"]:
        """`timeout` for the wall clock, `budget` for everything else."""
        return "timeout" if self.resource == "time" else "budget"


def estimate_tokens(text: str) -> int:
    """A cheap, conservative token estimate (about four characters a token)."""
    return math.ceil(len(text) / 4)


WarningCallback = Callable[[Resource, float, float], None]


class Budget:
    """The shared budget of one run and every nested RLM in it. Thread-safe."""

    def __init__(
        self,
        limits: Limits,
        prices: PriceTable | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_warning: WarningCallback | None = None,
    ) -> None:
        self.limits = limits
        self.prices = prices or PriceTable()
        self.usage = UsageSummary()
        self._clock = clock
        self._started = clock()
        self._lock = threading.Lock()
        self._reserved: dict[Role, int] = {"root": 0, "sub": 0}
        self._sub_calls_started = 0
        self._warned: set[Resource] = set()
        self._on_warning = on_warning
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
            self._fail("time", f"the run's timeout of {self.limits.timeout:g} s has passed")

    def expire_time(self) -> None:
        """Mark the wall-clock limit as reached and raise `BudgetExhausted`."""
        self._fail("time", f"the run's timeout of {self.limits.timeout:g} s has passed")

    # -- calls ------------------------------------------------------------------------------------
    def reserve(self, role: Role, estimated_input_tokens: int) -> int:
        """Check that a call may be sent and hold its estimated input tokens.

        Returns:
            The number of tokens reserved, to pass back to `commit` or `release`.

        Raises:
            BudgetExhausted: when the call would exceed a limit.
        """
        self.check_time()
        with self._lock:
            if self.exhausted is not None:
                raise self.exhausted
            limit = self.limits.max_root_tokens if role == "root" else self.limits.max_sub_tokens
            used = self._role_usage(role).total_tokens + self._reserved[role]
            if used + estimated_input_tokens > limit:
                self._fail_locked(
                    f"{role}_tokens",  # type: ignore[arg-type]
                    f"max_{role}_tokens={limit:,} reached ({used:,} used or in flight, "
                    f"next call needs about {estimated_input_tokens:,})",
                )
            if self.limits.max_cost is not None and self.usage.total_cost >= self.limits.max_cost:
                self._fail_locked(
                    "cost", f"max_cost={self.limits.max_cost:g} reached (spent {self.usage.total_cost:.4f})"
                )
            if role == "sub":
                if self.limits.max_sub_calls is not None and self._sub_calls_started >= self.limits.max_sub_calls:
                    self._fail_locked("sub_calls", f"max_sub_calls={self.limits.max_sub_calls} reached")
                self._sub_calls_started += 1
            self._reserved[role] += estimated_input_tokens
            return estimated_input_tokens

    def release(self, role: Role, reserved: int) -> None:
        """Give back a reservation whose call was never completed."""
        with self._lock:
            self._reserved[role] -= reserved

    def commit(
        self, role: Role, model: str, reserved: int, input_tokens: int, output_tokens: int, cost: float | None = None
    ) -> float:
        """Record a finished call, release its reservation and return its cost.

        `cost` is the provider's own figure when it reported one; otherwise the price table's.
        """
        if cost is None:
            cost = self.prices.cost(model, input_tokens, output_tokens)
            if self.prices.price(model) is None:
                note_unpriced(model, capped=self.limits.max_cost is not None)
        warnings: list[tuple[Resource, float, float]] = []
        with self._lock:
            self._reserved[role] -= reserved
            self.usage.record(role, model, input_tokens, output_tokens, cost)
            warnings = self._new_warnings()
        if self._on_warning is not None:
            for resource, used, limit in warnings:
                self._on_warning(resource, used, limit)
        return cost

    @property
    def sub_calls_started(self) -> int:
        """How many sub-calls were allowed to start so far."""
        return self._sub_calls_started

    # -- internals --------------------------------------------------------------------------------
    def _role_usage(self, role: Role) -> ModelUsage:
        return self.usage.root if role == "root" else self.usage.sub

    def _new_warnings(self) -> list[tuple[Resource, float, float]]:
        checks: list[tuple[Resource, float, float | None]] = [
            ("root_tokens", self.usage.root.total_tokens, self.limits.max_root_tokens),
            ("sub_tokens", self.usage.sub.total_tokens, self.limits.max_sub_tokens),
            ("cost", self.usage.total_cost, self.limits.max_cost),
        ]
        out: list[tuple[Resource, float, float]] = []
        for resource, used, limit in checks:
            if limit and used >= WARNING_FRACTION * limit and resource not in self._warned:
                self._warned.add(resource)
                out.append((resource, float(used), float(limit)))
        return out

    def _fail(self, resource: Resource, message: str) -> None:
        with self._lock:
            self._fail_locked(resource, message)

    def _fail_locked(self, resource: Resource, message: str) -> None:
        if self.exhausted is None:
            self.exhausted = BudgetExhausted(resource, message)
        raise self.exhausted
