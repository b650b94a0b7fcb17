"""The run's input: validated and described once (`RunContext`), written once as a file by a sandbox.

The context itself never goes into a prompt, an argv, a code string or the log: the root model sees
only its description, and an out-of-process sandbox reads the file `write_context_file` made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlm_adapters.errors import ContextError

PREVIEW_CHARS = 400  # the default of `RLM`'s ``context_preview_chars``
WRITE_SLICE = 1 << 20  # write big strings in slices so the host never holds a second, encoded copy

ContextFormat = Literal["text", "json"]


@dataclass(frozen=True)
class RunContext:
    """A validated context, prepared once for a run and passed down as it is.

    Attributes:
        value: The context itself (a tuple becomes a list).
        format: ``text`` for a str, ``json`` for a list or dict: how a sandbox loads its file.
        description: What the root model and the log see of it (never the whole of it).
        size: Characters of text in it (strings inside lists and dicts are counted).
    """

    value: Any
    format: ContextFormat
    description: dict[str, Any]
    size: int


def validate_context(context: Any, preview_chars: int = PREVIEW_CHARS) -> RunContext:
    """Check that `context` is a usable input and prepare it: validated, described and measured in one pass.

    Args:
        context: A non-empty str, list or dict of JSON-able values (a `RunContext` is returned as it is).
        preview_chars: How much of its beginning the description quotes (`RLM`'s ``context_preview_chars``).

    Raises:
        ContextError: naming what was wrong and what to do.
    """
    if isinstance(context, RunContext):
        return context
    if isinstance(context, bytes | bytearray):
        raise ContextError(
            f"the context is {type(context).__name__} ({len(context):,} bytes); decode it to str first, "
            "e.g. data.decode('utf-8', errors='replace')"
        )
    if isinstance(context, str):
        if not context or context.isspace():  # not `.strip()`: that copies the whole input
            raise ContextError(
                f"the context is an empty string ({len(context)} characters of whitespace); "
                "pass the text or documents to reason over"
            )
        description = {
            "type": "str",
            "total_chars": len(context),
            "lines": context.count("\n") + 1,
            "preview": context[:preview_chars],
        }
        return RunContext(context, "text", description, len(context))
    if isinstance(context, list | tuple):
        if not context:
            raise ContextError("the context is an empty list; pass at least one document or string")
        for index, item in enumerate(context):
            if not isinstance(item, str | dict | int | float | bool | list) and item is not None:
                raise ContextError(
                    f"context[{index}] is a {type(item).__name__}, not text: list items must be strings or "
                    "dicts such as {'id': ..., 'text': ..., 'metadata': ...}"
                )
        items = list(context)
        _json_preview(items, 0)
        return _prepared(items, _describe_list(items, preview_chars))
    if isinstance(context, dict):
        if not context:
            raise ContextError("the context is an empty dict; pass the data to reason over")
        keys = list(context.keys())
        description = {
            "type": "dict",
            "total_chars": total_chars(context),
            "keys": [str(k) for k in keys[:50]],
            "key_count": len(keys),
            "preview": _json_preview(context, preview_chars),
        }
        return _prepared(context, description)
    raise ContextError(
        f"the context is a {type(context).__name__}; pass a str, a list of strings or documents, or a dict"
    )


def _prepared(value: Any, description: dict[str, Any]) -> RunContext:
    return RunContext(value, "json", description, description["total_chars"])


def _describe_list(items: list[Any], preview_chars: int) -> dict[str, Any]:
    import statistics  # with its fractions and decimal, for list contexts only (a first call's import time)

    lengths = [total_chars(item) for item in items]
    description: dict[str, Any] = {
        "type": "list",
        "total_chars": sum(lengths),
        "items": len(items),
        "item_chars": {"min": min(lengths), "median": int(statistics.median(lengths)), "max": max(lengths)},
    }
    first = items[0]
    if isinstance(first, dict):
        description["item_keys"] = sorted(map(str, first.keys()))[:20]
    description["preview"] = json.dumps(first, ensure_ascii=False)[:preview_chars]
    return description


def _json_preview(value: Any, chars: int) -> str:
    """Encode `value` once (without keeping the text) to prove it JSON-able; return its first `chars` characters."""
    preview: list[str] = []
    kept = 0
    try:
        for chunk in json.JSONEncoder(ensure_ascii=False).iterencode(value):
            if kept < chars:
                preview.append(chunk[: chars - kept])
                kept += len(preview[-1])
    except (TypeError, ValueError) as exc:
        raise ContextError(
            f"the context cannot be handed to the sandbox as JSON ({exc}); convert its values to "
            "strings, numbers, lists and dicts"
        ) from None
    return "".join(preview)


def total_chars(context: Any) -> int:
    """Characters of text in the context (strings inside lists and dicts are counted)."""
    if isinstance(context, str):
        return len(context)
    if isinstance(context, dict):
        return sum(total_chars(v) + len(str(k)) for k, v in context.items())
    if isinstance(context, list):
        return sum(total_chars(v) for v in context)
    return len(str(context))


def describe_context(context: Any) -> dict[str, Any]:
    """A short description of the context for the root model and the log: never the whole of it."""
    return validate_context(context).description


def write_context_file(context: RunContext | Any, folder: Path) -> Path:
    """Write the context once into `folder` and return the file's path (``context.txt`` or ``context.json``)."""
    if isinstance(context, RunContext):
        context = context.value
    if isinstance(context, str):
        path = folder / "context.txt"
        with path.open("w", encoding="utf-8", errors="surrogatepass", newline="") as handle:
            for start in range(0, len(context), WRITE_SLICE):
                handle.write(context[start : start + WRITE_SLICE])
        return path
    path = folder / "context.json"
    with path.open("w", encoding="utf-8") as handle:
        for chunk in json.JSONEncoder(ensure_ascii=False).iterencode(context):
            handle.write(chunk)
    return path
