"""Checks of the frames a worker sends, before the host uses them.

The worker runs model-written code that can write any bytes to the protocol stream, so a frame is
untrusted input: each field must have the type the honest worker sends, ids must be plain integers,
and what the host keeps is bounded. A frame that fails a check raises `BadFrame` naming the field;
the channel then ends the connection and the sandbox restarts the worker.
"""

from __future__ import annotations

import math
from typing import Any

from rlm_adapters.core.sandbox.base import CellResult, FinalAnswer

MAX_VARIABLES_KEPT = 1000
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 200


class BadFrame(Exception):
    """A frame from the worker that the host does not accept; the message names what is wrong."""


def _kind(value: Any) -> str:
    return type(value).__name__


def _int(message: dict[str, Any], key: str, frame: str) -> int:
    value = message.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadFrame(f"{frame} frame: {key!r} must be a non-negative integer, got {_kind(value)}")
    return value


def _str(message: dict[str, Any], key: str, frame: str, *, optional: bool = False) -> str | None:
    value = message.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise BadFrame(f"{frame} frame: {key!r} must be a string, got {_kind(value)}")
    return encodable(value)


def encodable(text: str) -> str:
    """`text` with lone surrogates written as ``\\udXXX`` escapes, so every consumer can encode it as UTF-8.

    Model code can print them (``print('\\ud800')``); left in, they break whatever encodes the text
    later (a JSON-RPC response, a log file, an HTTP body).
    """
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def encodable_value(value: Any) -> Any:
    """A decoded JSON value with every string in it, keys included, made `encodable`."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, list):
        return [encodable_value(item) for item in value]
    if isinstance(value, dict):
        return {encodable(key) if isinstance(key, str) else key: encodable_value(item) for key, item in value.items()}
    return value


def check_ready(message: dict[str, Any]) -> dict[str, Any]:
    """The ``ready`` frame: ``ok`` (bool) and, when not ok, an ``error`` string."""
    if not isinstance(message.get("ok"), bool):
        raise BadFrame(f"'ready' frame: 'ok' must be true or false, got {_kind(message.get('ok'))}")
    _str(message, "error", "'ready'", optional=True)
    return message


def check_final(message: dict[str, Any]) -> tuple[int, FinalAnswer]:
    """The ``final`` frame: the cell id and the answer given with FINAL / FINAL_VAR."""
    return _int(message, "id", "'final'"), _final(message.get("final"), "'final'")


def _final(value: Any, frame: str) -> FinalAnswer:
    if not isinstance(value, dict):
        raise BadFrame(f"{frame} frame: 'final' must be an object, got {_kind(value)}")
    text = _str(value, "text", f"{frame} frame's final")
    assert text is not None
    raw = value.get("value")
    # A text answer's value is its (cleaned) text; a structured value is kept as sent.
    if value.get("value_is_text") is True or (isinstance(raw, str) and raw == value["text"]):
        return FinalAnswer(text, text)
    return FinalAnswer(text, encodable_value(raw))


def check_result(message: dict[str, Any]) -> tuple[int, CellResult]:
    """The ``result`` frame of a cell: its id and the checked `CellResult`."""
    frame = "'result'"
    cell_id = _int(message, "id", frame)
    output = _str(message, "output", frame)
    error = _str(message, "error", frame, optional=True)
    final = message.get("final")
    duration = message.get("duration")
    if not isinstance(duration, int | float) or isinstance(duration, bool) or not math.isfinite(duration):
        raise BadFrame(f"{frame} frame: 'duration' must be a number of seconds, got {_kind(duration)}")
    assert output is not None
    return cell_id, CellResult(
        output=output,
        output_chars=max(_int(message, "output_chars", frame), len(output)),
        error=error,
        final=None if final is None else _final(final, frame),
        variables=_variables(message.get("variables"), frame),
        duration=max(0.0, float(duration)),
    )


def _variables(value: Any, frame: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise BadFrame(f"{frame} frame: 'variables' must be an object, got {_kind(value)}")
    out: dict[str, str] = {}
    for name, description in value.items():
        if not isinstance(description, str):
            raise BadFrame(f"{frame} frame: the description of variable {name[:40]!r} must be a string")
        if len(out) < MAX_VARIABLES_KEPT:  # the rest is dropped: the model sees at most a few dozen anyway
            out[name[:MAX_NAME_CHARS]] = description[:MAX_DESCRIPTION_CHARS]
    return out


def check_call(message: dict[str, Any]) -> tuple[int, str, dict[str, Any]]:
    """The ``call`` frame: its id, the call's kind and its arguments (checked further by the broker)."""
    frame = "'call'"
    call_id = _int(message, "id", frame)
    kind = _str(message, "kind", frame)
    args = message.get("args")
    if not isinstance(args, dict):
        raise BadFrame(f"{frame} frame: 'args' must be an object, got {_kind(args)}")
    assert kind is not None
    return call_id, kind, args
