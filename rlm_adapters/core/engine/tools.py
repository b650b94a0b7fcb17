"""`custom_tools` / `custom_sub_tools`: host-side functions and plain values put into the REPL."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlm_adapters.core.sandbox import RESERVED_NAMES, ValueEncodingError, encode_value
from rlm_adapters.errors import ConfigurationError

ToolInput = Callable[..., Any] | Mapping[str, Any]


@dataclass(frozen=True)
class ToolSpec:
    """A host-side function exposed in the REPL."""

    fn: Callable[..., Any]
    description: str

    async def call(self, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run the function (sync ones in a thread, so the event loop stays free)."""
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(*args, **kwargs)
        outcome = await asyncio.to_thread(self.fn, *args, **kwargs)
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return outcome


@dataclass(frozen=True)
class ToolSet:
    """What one level of a run gets: functions called on the host, and values copied into the REPL.

    Attributes:
        functions: The functions by name.
        values: The plain values by name.
        notes: A one-line description of each value, for the system prompt.
    """

    functions: dict[str, ToolSpec] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)


def parse_tools(tools: Mapping[str, ToolInput] | None, parameter: str) -> ToolSet:
    """Split `custom_tools` into functions (called on the host) and plain values (copied into the REPL).

    Args:
        tools: ``{"name": fn}``, ``{"name": {"tool": fn, "description": "..."}}`` or plain values.
        parameter: The parameter's name, for error messages.
    """
    parsed = ToolSet()
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
            parsed.functions[name] = ToolSpec(fn, description or (fn.__doc__ or "").strip().split("\n")[0])
            continue
        try:
            encode_value(fn, f"{parameter}[{name!r}]")
        except ValueEncodingError as exc:
            raise ConfigurationError(str(exc)) from None
        parsed.values[name] = fn
        parsed.notes[name] = description or f"a {type(fn).__name__} value."
    return parsed
