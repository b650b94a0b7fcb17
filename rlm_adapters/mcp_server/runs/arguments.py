"""Tool arguments the server does not know are refused, never ignored.

The SDK validates a call's arguments against a model that ignores extra keys, so ``rlm_query(backgrund=True)``
would run in the foreground without a word. `strict_schema` marks each tool's input schema
``additionalProperties: false`` (clients that check schemas refuse before sending), and `StrictArguments`, a
server middleware, answers a ``tools/call`` naming an argument outside that schema with a tool error that
names it and the arguments there are (the closest one first, when the name looks like a typo).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent


def strict_schema(tool: Tool) -> Tool:
    """`tool` with ``additionalProperties: false`` in its input schema (changed in place, returned)."""
    tool.parameters["additionalProperties"] = False
    return tool


def unknown_arguments_message(tool: str, given: Iterable[str], known: Iterable[str]) -> str | None:
    """The refusal for the names in `given` that are not in `known` (None when there are none)."""
    names = sorted(known)
    unknown = [name for name in given if name not in names]
    if not unknown:
        return None
    first = unknown[0][:64]
    close = difflib.get_close_matches(first, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
    return f"{tool}: unknown argument {first!r}{more}{hint}; its arguments are {', '.join(names)}"


class StrictArguments:
    """SDK middleware: a ``tools/call`` with an argument its tool's input schema lacks gets an error result.

    Args:
        tools: The server's tools (their input schemas' ``properties`` are the arguments they take).
    """

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._known = {tool.name: frozenset(tool.parameters.get("properties", {})) for tool in tools}

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and isinstance(ctx.params, Mapping):
            name, arguments = ctx.params.get("name"), ctx.params.get("arguments")
            known = self._known.get(name) if isinstance(name, str) else None
            if known is not None and isinstance(arguments, Mapping):
                message = unknown_arguments_message(str(name), [str(key) for key in arguments], known)
                if message is not None:
                    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)
        return await call_next(ctx)


__all__ = ["StrictArguments", "strict_schema", "unknown_arguments_message"]
