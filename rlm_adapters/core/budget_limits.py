"""The caps of a run and the words for reaching one: `Limits`, `BudgetExhausted`, `BudgetWarning`.

`core/engine/budget.py` enforces them and re-exports these names: the rest of the engine imports them from there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from rlm_adapters.core.sandbox import BudgetSpent
from rlm_adapters.core.usage import Role

MIN_TOKEN_LIMIT = 50
DEFAULT_TOKEN_LIMIT = 1_000_000  # of root tokens, and of sub tokens, when the user sets none
WARNING_FRACTION = 0.8
# The output a call may produce when its client does not say (no ``max_tokens`` known).
DEFAULT_OUTPUT_RESERVE = 4096

# ``key_budget``: the run's `Account` (a key of a shared store) cannot pay for the next call (`core/account.py`).
Resource = Literal["root_tokens", "sub_tokens", "cost", "time", "sub_calls", "key_budget"]
# The `Limits` field of each resource `on_budget` may raise (the wall clock is not one).
LIMIT_FIELDS: dict[Resource, str] = {
    "root_tokens": "max_root_tokens",
    "sub_tokens": "max_sub_tokens",
    "cost": "max_cost",
    "sub_calls": "max_sub_calls",
}


def _flag(name: str, help: str, minimum: int = 0, aliases: tuple[str, ...] = ()) -> dict[str, object]:
    """A cap's flag, as `core.settings.Flag`'s fields (every cap is a limit of the run's spend)."""
    return {"name": name, "help": help, "minimum": minimum, "aliases": aliases, "limit": True}


@dataclass(frozen=True)
class Limits:
    """The caps of one run; None means unlimited.

    Each field is an `RLM` keyword of the same name (``timeout``: ``run_timeout``, its metadata's ``keyword``);
    its metadata's ``doc`` documents that keyword and its ``flag`` names every command's flag
    (`rlm_adapters.core.settings` reads them, with the other options').
    """

    max_root_tokens: int = field(
        default=DEFAULT_TOKEN_LIMIT,
        metadata={
            "doc": f"Token cap of the top-level root model (>= {MIN_TOKEN_LIMIT}).",
            "flag": _flag("--max-root-tokens", "tokens of the top-level root model", MIN_TOKEN_LIMIT),
        },
    )
    max_sub_tokens: int = field(
        default=DEFAULT_TOKEN_LIMIT,
        metadata={
            "doc": f"Token cap of every other call together (>= {MIN_TOKEN_LIMIT}).",
            "flag": _flag("--max-sub-tokens", "tokens of every other call together", MIN_TOKEN_LIMIT),
        },
    )
    max_cost: float | None = field(
        default=None,
        metadata={
            "doc": "Money cap of the whole run tree in USD (None: none).",
            "flag": _flag("--max-cost", "money limit in USD"),
        },
    )
    timeout: float | None = field(
        default=None,
        metadata={
            "doc": "The run's wall clock: seconds for the whole run tree, a running cell interrupted (None: none). "
            "Not a model request's timeout (a backend's ``timeout`` setting, 600 s by default).",
            "keyword": "run_timeout",  # `RLM`'s name, and every interface's; ``timeout`` stays an alias
            "aliases": ("timeout",),
            "flag": _flag("--run-timeout", "wall-clock limit of the run, seconds", 0, ("--timeout",)),
        },
    )
    max_sub_calls: int | None = field(
        default=None,
        metadata={
            "doc": "Cap on the calls made from the REPL at every depth: each prompt of `llm_query` / "
            "`llm_query_batched` and each nested run of `rlm_query*` counts one (None: none).",
            "flag": _flag("--max-sub-calls", "calls made from the REPL, at every depth", 0),
        },
    )

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
            raise ValueError(f"run_timeout={self.timeout!r} must be > 0 seconds (or None for no limit)")
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
    """What one call in flight holds: give it back to `Budget.settle` or `Budget.release`.

    Attributes:
        role: Whose tokens it holds.
        tokens: The tokens held.
        cost: The money held against ``max_cost``.
        account_hold: What the run's `Account` holds for it (None without an account).
    """

    role: Role
    tokens: int
    cost: float
    account_hold: object = None


def token_count(value: object) -> int:
    """A provider's token count as a non-negative int (a negative or odd one counts as 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(0, int(value))


def limit_amount(name: str, value: float) -> str:
    """A limit's value as the user reads it: ``$1.00``, ``30``, ``1,000,000`` (the terminal's and MCP's prompts)."""
    return f"${value:,.2f}" if name == "max_cost" else f"{int(value):,}"
