"""`rlm_query`'s schema: the arguments of a call that reaches a background run, and what the tool returns.

The tool takes one set of arguments for both kinds of call (a new run, or ``run_id=`` with ``wait`` or
``cancel``): `check_wait` and `check_fetch` refuse the combinations that mean nothing, in the tool's words. It
returns either a finished call's result or a `RunStatus`, so its output schema (`output_schema`) admits both,
and `rlm_query_tool` builds the tool with that schema and ``additionalProperties: false``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.mcpserver.tools import Tool
from mcp_types import ToolAnnotations
from pydantic import BaseModel

from rlm_adapters.errors import QueryError
from rlm_adapters.mcp_server.runs.arguments import strict_schema
from rlm_adapters.mcp_server.runs.background import RunStatus

# The longest one call may wait for a run: past it a client's own tool timeout has long fired.
MAX_WAIT = 600.0


def check_wait(wait: float | None) -> float:
    """The seconds a call waits for a run (0 when not given).

    Raises:
        QueryError: not a finite number from 0 to `MAX_WAIT`.
    """
    if wait is None:
        return 0.0
    if not math.isfinite(wait) or wait < 0:
        raise QueryError(f"wait={wait!r} must be a number of seconds from 0 to {MAX_WAIT:g}")
    if wait > MAX_WAIT:
        raise QueryError(
            f"wait={wait!r} is above the {MAX_WAIT:g} seconds one call may wait; call again with run_id to wait longer"
        )
    return float(wait)


def check_fetch(run_id: str, given: Mapping[str, Any], cancel_wait: float | None) -> None:
    """Refuse a ``run_id`` call that also passes a new call's arguments (`given`: name -> value, None when
    not passed), or that waits on a cancel (`cancel_wait`).

    Raises:
        QueryError: naming the arguments that do not go with ``run_id``.
    """
    extra = [name for name, value in given.items() if value is not None]
    if extra:
        raise QueryError(
            f"run_id={run_id[:64]!r} reaches a background run: pass only wait or cancel with it, not {', '.join(extra)}"
        )
    if cancel_wait:
        raise QueryError("cancel=true stops the run at once: leave out wait")


def output_schema(result: type[BaseModel]) -> dict[str, Any]:
    """The tool's output schema: `result` (a finished call's structured content) or a `RunStatus`.

    One object schema (clients require an object at the root) with both models' properties, and one
    ``anyOf`` branch per model saying which of them it requires.
    """
    done, running = result.model_json_schema(by_alias=True), RunStatus.model_json_schema(by_alias=True)
    definitions = {**done.pop("$defs", {}), **running.pop("$defs", {})}
    schema: dict[str, Any] = {
        "type": "object",
        "title": f"{result.__name__} | {RunStatus.__name__}",
        "properties": {**running["properties"], **done["properties"]},
        "anyOf": [{"required": done.get("required", [])}, {"required": running.get("required", [])}],
    }
    if definitions:
        schema["$defs"] = definitions
    return schema


def rlm_query_tool(fn: Callable[..., Any], description: str, result: type[BaseModel]) -> Tool:
    """The ``rlm_query`` tool around `fn`: unknown arguments refused, and an output schema that admits both
    a finished call's `result` and a background run's `RunStatus`."""
    tool = strict_schema(
        Tool.from_function(
            fn,
            name="rlm_query",
            title="Recursive Language Model query",
            description=description,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True, idempotent_hint=False),
        )
    )
    tool.fn_metadata.output_model = result | RunStatus
    tool.fn_metadata.output_schema = output_schema(result)
    with contextlib.suppress(AttributeError):
        del tool.output_schema  # a cached property: read again from the metadata
    return tool


__all__ = ["MAX_WAIT", "check_fetch", "check_wait", "output_schema", "rlm_query_tool"]
