"""Checks of the frames a worker sends, before the host uses them.

The worker runs model-written code that can write any bytes to the protocol stream, so a frame is
untrusted input: its body is parsed with bounded work (`parse_body`: at most `MAX_FRAME_VALUES` JSON values,
counted before the parser runs, and a budget for long integers), each field must have the type the honest
worker sends, ids must be plain integers, and what the host keeps is bounded. A frame that fails a check
raises `BadFrame` (or `ProtocolError`) naming what is wrong; the channel then ends the connection and the
sandbox restarts the worker.
"""

from __future__ import annotations

import math
from typing import Any

from rlm_adapters.core.sandbox.base import CellResult, FinalAnswer
from rlm_adapters.core.sandbox.programs.worker import MAX_FRAME_VALUES, ProtocolError, count_values, decode_body

MAX_VARIABLES_KEPT = 1000
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 200
# Parsing an integer of d digits costs about d**2: the digits of one frame may cost this much in all
# (about 0.1 s; an honest frame of a million 20-digit numbers uses 5% of it).
MAX_INTEGER_WORK = 2**33


class BadFrame(Exception):
    """A frame from the worker that the host does not accept; the message names what is wrong."""


class _IntegerBudget:
    """`parse_int` for one frame: refuses the frame once its integers' digits cost `MAX_INTEGER_WORK`."""

    def __init__(self) -> None:
        self.work = 0

    def __call__(self, text: str) -> int:
        self.work += len(text) ** 2
        if self.work > MAX_INTEGER_WORK:
            raise ProtocolError("its integers have too many digits to parse (a flood of long numbers)")
        return int(text)


def parse_body(body: bytes) -> dict[str, Any]:
    """A frame's body parsed with bounded work: at most `MAX_FRAME_VALUES` JSON values (counted before the
    parser runs, which would otherwise spend seconds on a frame of a million empty lists) and a budget for
    the digits of its integers.

    Raises:
        ProtocolError: The body is not a JSON message, or passes a bound (named in the message).
    """
    if len(body) > MAX_FRAME_VALUES and count_values(body, MAX_FRAME_VALUES) > MAX_FRAME_VALUES:
        raise ProtocolError(f"a frame of more than {MAX_FRAME_VALUES:,} JSON values")
    return decode_body(body, parse_int=_IntegerBudget())


def check_frame(message: dict[str, Any]) -> tuple[str, Any]:
    """A parsed frame's type and its checked content (what the matching ``check_*`` returns)."""
    kind = message.get("type")
    if kind == "ready":
        return kind, check_ready(message)
    if kind == "result":
        return kind, check_result(message)
    if kind == "final":
        return kind, check_final(message)
    if kind == "call":
        return kind, check_call(message)
    raise BadFrame(f"a frame of unknown type {str(kind)[:40]!r}")


def read_body(body: bytes) -> tuple[str, Any]:
    """`check_frame` of `parse_body`: pure, so that a large frame can be read off the event loop."""
    return check_frame(parse_body(body))


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
    try:
        return FinalAnswer(text, encodable_value(raw))
    except RecursionError:  # a value nested too deep to walk: the answer is its text
        return FinalAnswer(text, None)


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
