"""Model values shown as text by the worker: never raising, whatever their methods do, and cut to size."""

from __future__ import annotations

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def safe_text(value: Any) -> str:
    """`str(value)`, or the best that can be had when its `__str__` / `__repr__` raise."""
    for convert in (str, repr):
        try:
            text = convert(value)
            if isinstance(text, str):
                return text
        except Exception:  # not BaseException: a time limit's signal must still stop the cell
            pass
    return f"<{type_name(value)} object that cannot be shown>"


def type_name(value: Any) -> str:
    """The name of `value`'s type, at most 100 characters (never raises)."""
    try:
        return str(type(value).__name__)[:100]
    except Exception:
        return "object"


def cap(text: str, limit: int) -> str:
    """Head and tail of `text` within about `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3) :]
    return f"{head}\n... [{len(text) - len(head) - len(tail):,} characters cut] ...\n{tail}"


def describe_value(value: Any) -> str:
    """A short description of a REPL value: its type and size (never raises)."""
    kind = type_name(value)
    try:
        if isinstance(value, str | bytes | list | tuple | dict | set):
            unit = "chars" if isinstance(value, str) else "bytes" if isinstance(value, bytes) else "items"
            return f"{kind}, {len(value):,} {unit}"
    except Exception:  # a subclass whose __len__ raises
        pass
    return kind
