"""The arguments of a tool call from the REPL, decoded within bounds and, when large, off the event loop.

Model code writes them (it can forge any ``call`` frame), so they are tagged JSON from an attacker: a dict
of 60,000 integer keys that all hash alike took the host's loop 25 s to decode. `decode_tool_args` decodes
them with `DecodeBounds` (keys per mapping and per hash value, depth, items, text sizes), small arguments
right away and larger ones in a thread, and turns whatever is wrong into a `CallError` naming the bound:
a failed call for model code, never a stalled loop or a crashed run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rlm_adapters.core.sandbox.base import CallError
from rlm_adapters.core.sandbox.programs.worker import BoundExceeded, DecodeBounds, decode_value

TOOL_ARG_BOUNDS = DecodeBounds()
# Arguments of up to this many items are decoded on the loop (well under a millisecond); more go to a thread.
INLINE_ITEMS = 2_000
_INLINE = DecodeBounds(max_items=INLINE_ITEMS)


def _decode_args(args: dict[str, Any], bounds: DecodeBounds) -> tuple[list[Any], dict[str, Any]]:
    positional = decode_value(args.get("args") or [], bounds)
    named = decode_value(args.get("kwargs") or {}, bounds)
    if not isinstance(positional, list) or not isinstance(named, dict):
        raise TypeError("'args' must encode a list and 'kwargs' a dict")
    if not all(isinstance(key, str) for key in named):
        raise TypeError("keyword argument names must be strings")
    return positional, named


async def decode_tool_args(name: str, args: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments of a call of tool `name`, decoded from the frame's `args`.

    Raises:
        CallError: They cannot be decoded, or pass `TOOL_ARG_BOUNDS` (the message names the bound).
    """
    try:
        try:
            return _decode_args(args, _INLINE)
        except BoundExceeded as exc:
            if exc.bound != "max_items":
                raise
        return await asyncio.to_thread(_decode_args, args, TOOL_ARG_BOUNDS)
    except BoundExceeded as exc:
        raise CallError(f"tool {name!r}: its arguments were refused: {exc} (limit: {exc.bound})") from None
    except Exception as exc:  # the sandbox's data is untrusted: any failure to decode is its error
        raise CallError(f"tool {name!r}: undecodable arguments: {type(exc).__name__}: {exc}"[:500]) from None
