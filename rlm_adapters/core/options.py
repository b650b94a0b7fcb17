"""Reading `RLM`'s constructor options: limits, the reference RLM's aliases and sampling options, tools."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlm_adapters.core.lm import LMClient
from rlm_adapters.core.sandbox import RESERVED_NAMES, ValueEncodingError, encode_value
from rlm_adapters.core.tree import ToolSpec
from rlm_adapters.errors import ConfigurationError

ToolInput = Callable[..., Any] | Mapping[str, Any]


def positive_int(name: str, value: Any, minimum: int) -> int:
    """`value` when it is an integer >= `minimum`; else a `ConfigurationError` naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigurationError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


def alias(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    """One limit given under our name or the reference's, not both."""
    if alias_value is None:
        return value
    if value is not None:
        raise ConfigurationError(f"give {name}={value!r} or {alias}={alias_value!r}, not both (the same limit)")
    return alias_value


def apply_sampling(
    backend: str | LMClient,
    backend_kwargs: dict[str, Any] | None,
    other_backends: Sequence[str | LMClient] | None,
    other_backend_kwargs: Sequence[dict[str, Any]] | None,
    sampling_args: Mapping[str, Any] | None,
    sub_sampling_args: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], list[str | LMClient] | None, list[dict[str, Any]] | None]:
    """Merge the reference's `sampling_args` / `sub_sampling_args` into the backends' request options.

    The reference also reads ``backend_kwargs["sampling_args"]``; it is unpacked the same way.
    """
    root_kwargs = dict(backend_kwargs or {})
    nested = root_kwargs.pop("sampling_args", None) or {}
    root_kwargs.update({**nested, **dict(sampling_args or {})})
    if (nested or sampling_args) and not isinstance(backend, str):
        raise ConfigurationError("sampling_args need a backend name; set them on the model client instance itself")
    others = list(other_backends) if other_backends is not None else None
    other_kwargs = [dict(k) for k in other_backend_kwargs] if other_backend_kwargs is not None else None
    if other_kwargs:
        other_kwargs = [{**k, **(k.pop("sampling_args", None) or {})} for k in other_kwargs]
    if sub_sampling_args:
        if not others:
            others, other_kwargs = [backend], [{k: v for k, v in root_kwargs.items() if k not in (sampling_args or {})}]
        if not isinstance(others[0], str):
            raise ConfigurationError("sub_sampling_args need a backend name for the first other backend")
        other_kwargs = other_kwargs or [{}]
        other_kwargs[0] = {**other_kwargs[0], **dict(sub_sampling_args)}
    return root_kwargs, others, other_kwargs


def parse_tools(
    tools: Mapping[str, ToolInput] | None, parameter: str
) -> tuple[dict[str, ToolSpec], dict[str, Any], dict[str, str]]:
    """Split `custom_tools` into functions (called on the host) and plain values (copied into the REPL).

    Returns:
        The functions, the values, and a one-line description of each value for the system prompt.
    """
    functions: dict[str, ToolSpec] = {}
    values: dict[str, Any] = {}
    notes: dict[str, str] = {}
    names = list((tools or {}).keys())
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier()]
    if bad:
        raise ConfigurationError(f"{parameter}: {bad!r} are not valid Python names")
    clashes = sorted(n for n in names if n in RESERVED_NAMES)
    if clashes:
        raise ConfigurationError(
            f"{parameter}: {clashes!r} clash with the REPL's own names {sorted(RESERVED_NAMES)}; rename them"
        )
    for name, entry in (tools or {}).items():
        if isinstance(entry, Mapping) and "tool" in entry:
            fn, description = entry["tool"], str(entry.get("description") or "")
        else:
            fn, description = entry, ""
        if callable(fn):
            functions[name] = ToolSpec(fn, description or (fn.__doc__ or "").strip().split("\n")[0])
            continue
        try:
            encode_value(fn, f"{parameter}[{name!r}]")
        except ValueEncodingError as exc:
            raise ConfigurationError(str(exc)) from None
        values[name] = fn
        notes[name] = description or f"a {type(fn).__name__} value."
    return functions, values, notes
