"""`RLMSettings`: every plain-value option of an `RLM` (limits, loop, sandbox, session), checked once.

`RLM.__init__` builds one; each run takes the one in force when it starts and shares it with every nested
run (`RunTree.settings`). `DEFAULTS` is the one place a default lives: `RLM`'s signature, `ChatRLM`'s
fields, ``rlm-mcp``'s configuration and ``rlm ask``'s flags all read theirs from it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, overload

from rlm_adapters.core.budget import Limits
from rlm_adapters.core.engine.parsing import CodeFences
from rlm_adapters.core.engine.session import ContextAlias, check_session_options
from rlm_adapters.core.lm import DEFAULT_CEILING
from rlm_adapters.core.pricing import Price, as_price
from rlm_adapters.core.sandbox import sandbox_kinds
from rlm_adapters.errors import ConfigurationError

T = TypeVar("T")
# Which final-answer protocol the system prompt teaches (both are always accepted).
FinalProtocol = Literal["FINAL", "answer"]


def positive_int(name: str, value: Any, minimum: int) -> int:
    """`value` when it is an integer >= `minimum`; else a `ConfigurationError` naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigurationError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


def _optional_int(name: str, value: Any, minimum: int) -> None:
    if value is not None:
        positive_int(name, value, minimum)


def _price_pair(value: Any) -> bool:
    return (
        isinstance(value, tuple | list)
        and len(value) in (2, 4)
        and all(isinstance(p, int | float) and not isinstance(p, bool) and math.isfinite(p) and p >= 0 for p in value)
    )


def _check_mappings(environment_kwargs: Any, prices: Any) -> None:
    """The two dict options: checked here, since a bad price would only fail when a call is priced."""
    if not isinstance(environment_kwargs, Mapping) or not all(isinstance(k, str) for k in environment_kwargs):
        raise ConfigurationError(f"environment_kwargs={environment_kwargs!r} must be a dict of option names")
    if not isinstance(prices, Mapping):
        raise ConfigurationError(f"prices={prices!r} must be a dict {{model: (usd_per_mtok_in, usd_per_mtok_out)}}")
    for model, pair in prices.items():
        if not isinstance(model, str) or not _price_pair(pair):
            raise ConfigurationError(
                f"prices[{model!r}]={pair!r} must be (usd_per_mtok_in, usd_per_mtok_out) or (in, out, cache_read, "
                "cache_write): two or four numbers >= 0"
            )


@dataclass(frozen=True, kw_only=True)
class RLMSettings:
    """The options of an `RLM` that are plain values, validated when built (`dataclasses.replace` too).

    The fields carry `RLM`'s parameter names and mean what its docstring says; the token, cost, time and
    sub-call caps are `limits` (a `Limits`). Models, tools, the logger and callbacks are objects, not
    settings, and stay on the `RLM`.
    """

    limits: Limits = field(default_factory=Limits)
    max_depth: int = 1
    max_iterations: int = 30
    max_concurrency: int = DEFAULT_CEILING
    max_concurrent_subcalls: int | None = None
    max_batch: int = 10_000
    max_sandboxes: int = 32
    max_output_chars: int = 10_000
    max_errors: int | None = None
    max_tokens: int | None = None
    environment: str = "subprocess"
    environment_kwargs: Mapping[str, Any] = field(default_factory=dict)
    instructions: str | None = None
    custom_system_prompt: str | None = None
    final_protocol: FinalProtocol = "FINAL"
    code_fences: CodeFences = "any"
    compaction: bool = False
    compaction_threshold_pct: float = 0.85
    context_window: int = 128_000
    prices: Mapping[str, Price] = field(default_factory=dict)
    raise_on_budget: bool = False
    verbose: bool = False
    persistent: bool = False
    context_alias: ContextAlias = "latest"
    session_idle_timeout: float | None = None
    session_max_lifetime: float | None = None

    def __post_init__(self) -> None:
        self.limits.validate()
        positive_int("max_depth", self.max_depth, 0)
        positive_int("max_iterations", self.max_iterations, 1)
        positive_int("max_concurrency", self.max_concurrency, 1)
        positive_int("max_batch", self.max_batch, 1)
        positive_int("max_sandboxes", self.max_sandboxes, 1)
        positive_int("max_output_chars", self.max_output_chars, 100)
        positive_int("context_window", self.context_window, 1000)
        _optional_int("max_concurrent_subcalls", self.max_concurrent_subcalls, 1)
        _optional_int("max_errors", self.max_errors, 1)
        _optional_int("max_tokens", self.max_tokens, 1)
        if self.environment not in sandbox_kinds():
            raise ConfigurationError(f"unknown environment {self.environment!r}; use one of {sandbox_kinds()}")
        if self.final_protocol not in ("FINAL", "answer"):
            raise ConfigurationError(f"final_protocol={self.final_protocol!r} must be 'FINAL' or 'answer'")
        if self.code_fences not in ("any", "repl"):
            raise ConfigurationError(f"code_fences={self.code_fences!r} must be 'any' or 'repl'")
        pct = self.compaction_threshold_pct
        if not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 < pct <= 1:
            raise ConfigurationError(f"compaction_threshold_pct={pct!r} must be in (0, 1]")
        _check_mappings(self.environment_kwargs, self.prices)
        check_session_options(
            context_alias=self.context_alias,
            idle_timeout=self.session_idle_timeout,
            max_lifetime=self.session_max_lifetime,
        )
        # Copies: a dict the caller changes later must not change these settings.
        object.__setattr__(self, "environment_kwargs", dict(self.environment_kwargs))
        object.__setattr__(self, "prices", {model: as_price(pair) for model, pair in self.prices.items()})


DEFAULTS = RLMSettings()


class Setting(Generic[T]):
    """An attribute that is one field of a frozen object its owner holds (``rlm.max_depth`` is
    ``rlm.settings.max_depth``, ``rlm.backend`` is ``rlm.backends.backend``).

    Setting it replaces that object with a copy, checked again; a run already going on keeps the one it
    started with.

    Args:
        holder: The owner's attribute holding the frozen object.
    """

    def __init__(self, holder: str = "settings") -> None:
        self.holder = holder
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: object | None, owner: type) -> Setting[T] | T:
        if instance is None:
            return self
        value: T = getattr(getattr(instance, self.holder), self.name)
        return value

    def __set__(self, instance: object, value: T) -> None:
        held = getattr(instance, self.holder)
        setattr(instance, self.holder, dataclasses.replace(held, **{self.name: value}))
