"""The REPL functions that reach the host: sub-model calls, nested RLMs and the caller's tools.

Each travels to the host as one ``call`` frame (`protocol.WorkerChannel.call`, or the ``local`` sandbox's
direct function); the host holds the keys and the budget. A failed call returns ``"Error: ..."`` (see
`CALL_ERROR_PREFIX`); only a spent budget raises, since the run is over then. Bad arguments (a str where a
list belongs) still raise TypeError at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .protocol import CallFailed
from .text import safe_text, type_name
from .values import decode_value, encode_value

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    CallFunction: TypeAlias = Callable[[str, dict[str, Any]], Any]

# The JSON of one call_tool's arguments may be this long (the host checks the same bound again).
MAX_TOOL_ARGS_CHARS = 1_000_000
# The prefix of the string a failed llm_query / llm_query_batched slot / rlm_query returns (the reference
# RLM's rule): model code can test ``reply.startswith("Error: ")`` and carry on.
CALL_ERROR_PREFIX = "Error: "


class HostCalls:
    """``llm_query``, ``llm_query_batched``, ``rlm_query``, ``rlm_query_batched``, ``call_tool`` and the tools.

    Args:
        call: How a call reaches the host: ``call(kind, args) -> value``; it raises `CallFailed` or
            `BudgetExhaustedError` on failure.
    """

    def __init__(self, call: CallFunction) -> None:
        self._call = call

    def llm_query(self, prompt: Any, model: str | None = None) -> str:
        """Ask a sub-model one question; returns its reply text, or ``"Error: ..."`` if the call failed."""
        try:
            return str(self._call("llm_query", {"prompt": _as_prompt(prompt), "model": model}))
        except CallFailed as exc:
            return f"{CALL_ERROR_PREFIX}{exc}"

    def llm_query_batched(self, prompts: Any, model: str | None = None) -> list[str]:
        """Ask many prompts concurrently; returns replies in order (``"Error: ..."`` in a failed slot)."""
        items = _as_prompt_list(prompts, "llm_query_batched")
        if not items:
            return []
        try:
            return [str(r) for r in self._call("llm_query_batched", {"prompts": items, "model": model})]
        except CallFailed as exc:
            return [f"{CALL_ERROR_PREFIX}{exc}"] * len(items)

    def rlm_query(self, prompt: Any, context: Any = None, model: str | None = None) -> str:
        """Run a nested RLM (depth + 1) on `prompt` over `context` (default: the prompt alone)."""
        try:
            return str(self._call("rlm_query", {"prompt": _as_prompt(prompt), "context": context, "model": model}))
        except CallFailed as exc:
            return f"{CALL_ERROR_PREFIX}{exc}"

    def rlm_query_batched(self, prompts: Any, contexts: Any = None, model: str | None = None) -> list[str]:
        """Run several nested RLMs concurrently; returns answers in input order (``"Error: ..."`` if failed)."""
        items = _as_prompt_list(prompts, "rlm_query_batched")
        if contexts is not None:
            if not isinstance(contexts, list | tuple) or len(contexts) != len(items):
                raise TypeError(
                    "rlm_query_batched(prompts, contexts): contexts must be a list as long as prompts "
                    f"({len(items)}), got {type(contexts).__name__}"
                )
            contexts = list(contexts)
        if not items:
            return []
        try:
            return [
                str(r)
                for r in self._call("rlm_query_batched", {"prompts": items, "contexts": contexts, "model": model})
            ]
        except CallFailed as exc:
            return [f"{CALL_ERROR_PREFIX}{exc}"] * len(items)

    def call_tool(self, name: Any, arguments: Any = None, /, **kwargs: Any) -> None:
        """Call one of the caller's tools: ``call_tool("search", query="...")`` (or a dict of arguments).

        Returns None: the caller runs the tool after this turn, which ends once the cell is over. The host
        checks the call against the tool's schema; a bad call is reported after the cell.
        """
        if not isinstance(name, str):
            raise TypeError(f"call_tool(name, ...): the tool's name must be a string, got {type_name(name)}")
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError(
                f"call_tool({name[:80]!r}, arguments): arguments must be a dict (or give keyword arguments), "
                f"got {type_name(arguments)}"
            )
        merged = {**(arguments or {}), **kwargs}
        try:
            text = json.dumps(merged, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(
                f"call_tool({name[:80]!r}): the arguments must be JSON data (str, int, float, bool, None, lists "
                f"and dicts with string keys): {safe_text(exc)[:200]}"
            ) from None
        if len(text) > MAX_TOOL_ARGS_CHARS:
            raise ValueError(
                f"call_tool({name[:80]!r}): the arguments are {len(text):,} characters of JSON, over the "
                f"{MAX_TOOL_ARGS_CHARS:,} allowed; pass a short reference instead of the data"
            )
        self._call("call_tool", {"name": name[:1000], "args": json.loads(text)})

    def tool(self, name: str, description: str) -> Callable[..., Any]:
        """A host-side function given as a tool, callable by name in the namespace (values tagged both ways)."""

        def tool(*args: Any, **kwargs: Any) -> Any:
            where = f"an argument of {name}()"
            payload = {"name": name, "args": encode_value(list(args), where), "kwargs": encode_value(kwargs, where)}
            return decode_value(self._call("tool", payload))

        tool.__name__ = name
        tool.__doc__ = description
        return tool


def _as_prompt(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else str(prompt)


def _as_prompt_list(prompts: Any, function: str) -> list[str]:
    if isinstance(prompts, str | bytes) or not hasattr(prompts, "__iter__"):
        raise TypeError(
            f"{function} expects a list of prompts, got {type(prompts).__name__}; "
            f"wrap a single prompt in a list or use {function.removesuffix('_batched')}"
        )
    return [_as_prompt(p) for p in prompts]
