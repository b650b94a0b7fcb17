"""The models `rlm serve` serves: ``--model NAME=ROOT[,key=value...]`` and the `RLM` options of each.

A served model is a name the clients put in ``model``, mapped to a root model, an optional sub-model and
the limits of every run made under that name. Syntax of one ``--model`` value::

    rlm-mini=gpt-5-mini,sub=gpt-5-nano,max_cost=0.50

The part before the first ``=`` is the served name; then the root model; then ``key=value`` items:
``sub``, ``backend``, ``base_url``, ``direct_below_tokens`` (a number, or ``off``), ``price`` / ``sub_price``
(``INPUT/OUTPUT``, US dollars per million tokens)
and the run limits (`LIMIT_KEYS`: the options declared as limits, `core.settings`' ``Flag(limit=True)``, by
their `RLM` keywords; ``timeout`` is the older name of ``run_timeout``, the run's wall clock). Each limit takes
what its flag takes (``max_root_tokens`` at least 50, as `RLM` does). A limit a model leaves out takes the
server's ceiling (`SERVER_CEILINGS`, set by ``rlm serve``'s flags), so no run is ever unbounded: the client
cannot raise any of them (the Chat Completions API has no field for them, and unknown fields are refused).
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from rlm_adapters.core.adapter_kit import CHAT_DIRECT_BELOW_TOKENS, DEFAULTS, Declared, flagged
from rlm_adapters.core.sandbox import DEFAULT_CELL_TIMEOUT
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.flags import ceiling_flag, parse_price, value_type
from rlm_adapters.model_flags import PROVIDER_BACKENDS, credentials_problem, model_options

# The name served when no --model is given (the model then comes from RLM_MODEL / RLM_SUB_MODEL).
DEFAULT_NAME = "rlm"
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@")
# The limits of a run, by `RLM` keyword: the options declared as one (``Flag(limit=True)``), in declaration order.
LIMITS: dict[str, Declared] = {d.name: d for d in flagged() if d.option.flag is not None and d.option.flag.limit}
LIMIT_KEYS = tuple(LIMITS)
INT_LIMITS = tuple(key for key, d in LIMITS.items() if d.type.startswith("int"))
FLOAT_LIMITS = tuple(key for key in LIMITS if key not in INT_LIMITS)
MODEL_KEYS = ("sub", "backend", "base_url", "direct_below_tokens", "price", "sub_price")
# A limit's older name a --model value may use (the option's alias): ``timeout`` for ``run_timeout``.
LIMIT_SPELLINGS = {alias: d.name for d in LIMITS.values() for alias in d.option.aliases}


@dataclass(frozen=True)
class Ceilings:
    """The most any run may use: the limits a served model leaves out, and the bound on those it sets.

    One field per limit (`LIMITS`), named as `Limits`' fields are (``timeout`` is the ``run_timeout`` keyword's
    field); its defaults are the server's, tighter than `RLM`'s, so that no run is unbounded.

    Attributes:
        max_cost: US dollars per run.
        timeout: Wall-clock seconds per run (``run_timeout`` in a --model value, ``--max-run-timeout``).
        max_root_tokens: Tokens of the top-level root model per run.
        max_sub_tokens: Tokens of every other call of a run together.
        max_sub_calls: Sub-calls per run.
        max_depth: Recursion depth.
        max_iterations: Root turns per run level.
        max_reply_tokens: The most tokens one model reply may hold.
        cell_timeout: Seconds one code cell may compute (waits on model calls not counted).
    """

    max_cost: float = 1.0
    timeout: float = 900.0
    max_root_tokens: int = DEFAULTS.limits.max_root_tokens
    max_sub_tokens: int = DEFAULTS.limits.max_sub_tokens
    max_sub_calls: int = 500
    max_depth: int = DEFAULTS.max_depth
    max_iterations: int = DEFAULTS.max_iterations
    max_reply_tokens: int = DEFAULTS.max_reply_tokens or 16_384
    cell_timeout: float = DEFAULT_CELL_TIMEOUT

    @property
    def run_timeout(self) -> float:
        """The run's wall clock by its `RLM` keyword (``--max-run-timeout``): the field `timeout`."""
        return self.timeout

    def limits(self) -> dict[str, Any]:
        """Each limit by its `RLM` keyword."""
        return {key: self.ceiling(key) for key in LIMIT_KEYS}

    def ceiling(self, key: str) -> Any:
        """The ceiling of the limit whose `RLM` keyword is `key`."""
        return getattr(self, LIMITS[key].field)


SERVER_CEILINGS = Ceilings()


@dataclass(frozen=True)
class ServedModel:
    """One name clients may ask for, and how its runs are made.

    Attributes:
        name: What clients send as ``model`` (and what ``GET /v1/models`` lists).
        root: The root model's name.
        sub: The sub-model's name (None: the root model answers sub-calls too).
        backend: The backend of both (one of `rlm_adapters.model_flags.PROVIDER_BACKENDS`).
        base_url: The endpoint of an OpenAI-compatible server (else ``OPENAI_BASE_URL``, else the provider's).
        limits: The run limits this model sets itself, by `RLM` keyword (the others come from the ceilings).
        api_key: The upstream API key (else the provider's environment variable); never shown.
        direct_below_tokens: A request whose conversation is under this many tokens is one plain call to the
            root model, streamed as it arrives (None: always the RLM). Its default is `ChatRLM`'s: ``rlm serve``
            stands in for a plain chat model's endpoint (docs/serve.md).
        options: Other `RLM` options of its runs (``prices``: its ``price`` keys and ``rlm serve --price``).
    """

    name: str
    root: str
    sub: str | None = None
    backend: str = "openai"
    base_url: str | None = None
    limits: Mapping[str, float | int] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)
    direct_below_tokens: int | None = CHAT_DIRECT_BELOW_TOKENS
    options: Mapping[str, Any] = field(default_factory=dict)

    def run_limits(self, ceilings: Ceilings) -> dict[str, Any]:
        """The limits of each run: this model's own where it sets them, else the server's ceilings."""
        return {**ceilings.limits(), **self.limits}

    def rlm_options(self, ceilings: Ceilings, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """`RLM` keyword arguments for one run of this model (backends and limits).

        Raises:
            ConfigurationError: No key or address for the backend (worded for the command line).
        """
        options = model_options(
            model=self.root,
            sub_model=self.sub,
            backend=self.backend,
            base_url=self.base_url,
            api_key=self.api_key,
            environ=os.environ if environ is None else environ,
        )
        if not self.sub:
            # model_options mirrors nothing without a sub-model: the root model answers llm_query too.
            options["other_backends"] = [options["backend"]]
            options["other_backend_kwargs"] = [dict(options["backend_kwargs"])]
        problem = credentials_problem(options, environ)
        if problem is not None:
            raise ConfigurationError(f"--model {self.name}: {problem}")
        return {
            **options,
            **self.options,
            **self.run_limits(ceilings),
            "direct_below_tokens": self.direct_below_tokens,
        }

    def priced_by_key(self) -> dict[str, str]:
        """The models its runs call, by the --model key that prices each (``price``, ``sub_price``)."""
        return {"price": self.root, **({"sub_price": self.sub} if self.sub else {})}

    def described(self) -> dict[str, Any]:
        """What ``GET /v1/models`` says of it (OpenAI's model object, with the RLM's parts beside)."""
        return {
            "id": self.name,
            "object": "model",
            "created": 0,
            "owned_by": "rlm-adapters",
            "rlm": {"root_model": self.root, "sub_model": self.sub or self.root, "backend": self.backend},
        }


def parse_model(spec: str, ceilings: Ceilings = SERVER_CEILINGS) -> ServedModel:
    """A served model from one ``--model`` value, ``NAME=ROOT[,sub=SUB][,backend=B][,base_url=URL][,LIMIT=N...]``.

    Raises:
        ConfigurationError: A missing part, an unknown key, a bad number or a limit above the ceiling,
            each named as the flag spells it.
    """
    name, sep, rest = spec.partition("=")
    name = name.strip()
    if not sep or not name or not rest.strip():
        raise ConfigurationError(
            f"--model {spec!r}: write NAME=ROOT_MODEL[,sub=SUB_MODEL][,max_cost=0.50...], "
            "for example --model rlm-mini=gpt-5-mini,sub=gpt-5-nano,max_cost=0.50"
        )
    if not set(name) <= NAME_CHARS or len(name) > 128:
        raise ConfigurationError(
            f"--model {spec!r}: the served name {name!r} may hold only letters, digits and - _ . : / @ (at most 128)"
        )
    root, *items = [part.strip() for part in rest.split(",")]
    if not root or "=" in root:
        raise ConfigurationError(f"--model {spec!r}: the root model comes first after {name}=, e.g. {name}=gpt-5-mini")
    values: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        key = LIMIT_SPELLINGS.get(key, key)
        if not sep or not value:
            raise ConfigurationError(f"--model {spec!r}: {item!r} is not key=value")
        if key not in (*MODEL_KEYS, *LIMIT_KEYS):
            known = (*MODEL_KEYS, *LIMIT_KEYS, *LIMIT_SPELLINGS)
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]}? Keys: " if close else "use "
            raise ConfigurationError(f"--model {spec!r}: unknown key {key!r}; {hint}{', '.join(known)}")
        if key in values:
            raise ConfigurationError(f"--model {spec!r}: {key} is given twice (run_timeout and timeout are one limit)")
        values[key] = value
    backend = values.get("backend", os.environ.get("RLM_BACKEND") or "openai")
    if backend not in PROVIDER_BACKENDS:
        raise ConfigurationError(f"--model {spec!r}: backend={backend!r} is not one of {', '.join(PROVIDER_BACKENDS)}")
    limits = {key: _limit(spec, key, values[key], ceilings) for key in LIMIT_KEYS if key in values}
    prices = {
        model: _price(spec, key, model, values[key])
        for key, model in (("price", root), ("sub_price", values.get("sub")))
        if key in values
    }
    if "sub_price" in prices and not values.get("sub"):
        raise ConfigurationError(f"--model {spec!r}: sub_price prices the sub-model: give sub=SUB_MODEL too")
    options = {"prices": prices} if prices else {}
    served = ServedModel(name, root, values.get("sub"), backend, values.get("base_url"), limits, options=options)
    if "direct_below_tokens" in values:
        served = replace(served, direct_below_tokens=_direct_below(spec, values["direct_below_tokens"]))
    return served


def _price(spec: str, key: str, model: Any, text: str) -> tuple[float, float]:
    """``INPUT/OUTPUT`` of a ``price`` key (a comma separates the value's items), checked as ``--price`` is."""
    try:
        return parse_price(f"{model}={text.replace('/', ',')}")[1]
    except argparse.ArgumentTypeError:
        raise ConfigurationError(
            f"--model {spec!r}: {key}={text!r} must be INPUT/OUTPUT in US dollars per million tokens, e.g. 0.25/2.00"
        ) from None


def _direct_below(spec: str, text: str) -> int | None:
    if text.lower() in ("off", "none"):
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigurationError(
            f"--model {spec!r}: direct_below_tokens={text!r} must be a whole number of tokens >= 1, or off"
        )
    return int(text)


def _limit(spec: str, key: str, text: str, ceilings: Ceilings) -> float | int:
    """A limit's value, read as its flag reads it (its declared minimum), at most the server's ceiling."""
    ceiling = ceilings.ceiling(key)
    try:
        value: float | int = value_type(LIMITS[key])(text)
    except argparse.ArgumentTypeError as exc:
        raise ConfigurationError(f"--model {spec!r}: {key}={exc}") from None
    if value > ceiling:
        flag = ceilings_flags()[key]
        raise ConfigurationError(
            f"--model {spec!r}: {key}={text} is above the server's ceiling {ceiling} (raise it with {flag})"
        )
    return value


def default_model(environ: Mapping[str, str] | None = None) -> ServedModel:
    """The model served as ``rlm`` when no ``--model`` is given: ``RLM_MODEL`` over ``RLM_SUB_MODEL``.

    Raises:
        ConfigurationError: ``RLM_MODEL`` is not set.
    """
    env = os.environ if environ is None else environ
    root = env.get("RLM_MODEL")
    if not root:
        raise ConfigurationError(
            "no model to serve: pass --model NAME=ROOT_MODEL[,sub=SUB_MODEL] (e.g. --model "
            "rlm-mini=gpt-5-mini,sub=gpt-5-nano,max_cost=0.50) or set RLM_MODEL"
        )
    return ServedModel(DEFAULT_NAME, root, env.get("RLM_SUB_MODEL"), env.get("RLM_BACKEND") or "openai")


def with_key(model: ServedModel, api_key: str | None) -> ServedModel:
    """`model` with an upstream API key (for tests and embedding; the command line reads the environment)."""
    return replace(model, api_key=api_key)


def ceilings_flags() -> dict[str, str]:
    """``rlm serve``'s flag of each ceiling, by limit keyword: the option's flag, ``--max-`` in front where it
    has none (``--max-run-timeout``; its older name ``--max-timeout``)."""
    return {key: ceiling_flag(d.option.flag.name) for key, d in LIMITS.items() if d.option.flag is not None}
