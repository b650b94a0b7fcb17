"""The run's input: validated once, described for the root model, written once as a file for a sandbox.

The context itself never goes into a prompt, an argv, a code string or the log: the root model sees
only `describe_context`, and an out-of-process sandbox reads the file `write_context_file` made.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any, Literal

from rlm_adapters.errors import ContextError

PREVIEW_CHARS = 400
WRITE_SLICE = 1 << 20  # write big strings in slices so the host never holds a second, encoded copy

ContextFormat = Literal["text", "json"]


def validate_context(context: Any) -> Any:
    """Check that `context` is a usable input: a non-empty str, list or dict of JSON-able values.

    Raises:
        ContextError: naming what was wrong and what to do.
    """
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
        return context
    if isinstance(context, list | tuple):
        if not context:
            raise ContextError("the context is an empty list; pass at least one document or string")
        for index, item in enumerate(context):
            if not isinstance(item, str | dict | int | float | bool | list) and item is not None:
                raise ContextError(
                    f"context[{index}] is a {type(item).__name__}, not text: list items must be strings or "
                    "dicts such as {'id': ..., 'text': ..., 'metadata': ...}"
                )
        _check_json(context)
        return list(context)
    if isinstance(context, dict):
        if not context:
            raise ContextError("the context is an empty dict; pass the data to reason over")
        _check_json(context)
        return context
    raise ContextError(
        f"the context is a {type(context).__name__}; pass a str, a list of strings or documents, or a dict"
    )


def _check_json(value: Any) -> None:
    try:
        json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ContextError(
            f"the context cannot be handed to the sandbox as JSON ({exc}); convert its values to "
            "strings, numbers, lists and dicts"
        ) from None


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
    description: dict[str, Any] = {"type": type(context).__name__, "total_chars": total_chars(context)}
    if isinstance(context, str):
        description["lines"] = context.count("\n") + 1
        description["preview"] = context[:PREVIEW_CHARS]
    elif isinstance(context, list):
        lengths = [total_chars(item) for item in context]
        description["items"] = len(context)
        description["item_chars"] = {
            "min": min(lengths),
            "median": int(statistics.median(lengths)),
            "max": max(lengths),
        }
        first = context[0]
        if isinstance(first, dict):
            description["item_keys"] = sorted(map(str, first.keys()))[:20]
        description["preview"] = json.dumps(first, ensure_ascii=False)[:PREVIEW_CHARS]
    elif isinstance(context, dict):
        keys = list(context.keys())
        description["keys"] = [str(k) for k in keys[:50]]
        description["key_count"] = len(keys)
        description["preview"] = json.dumps(context, ensure_ascii=False)[:PREVIEW_CHARS]
    return description


def context_format(context: Any) -> ContextFormat:
    """``text`` for a str, ``json`` for anything else."""
    return "text" if isinstance(context, str) else "json"


def write_context_file(context: Any, folder: Path) -> Path:
    """Write the context once into `folder` and return the file's path."""
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
