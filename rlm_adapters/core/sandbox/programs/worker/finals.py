"""The run's final answer as model code gives it: ``FINAL``, ``FINAL_VAR`` and the reference's answer dict.

The answer is recorded as text first (nothing after that may lose it), cut to fit one frame, and announced
to the host at once (`Finals.on_final`), before the cell ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .protocol import MAX_FRAME_VALUES, count_values
from .text import safe_text

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# A final answer longer than this is cut (with a note): it must fit in one frame with room to spare.
MAX_FINAL_CHARS = 64 * 1024 * 1024
# The JSON value of a non-text final answer is kept only up to this size (its text always is).
MAX_FINAL_VALUE_CHARS = 8 * 1024 * 1024
# ... and only up to this many JSON values, so that a frame carrying it stays within MAX_FRAME_VALUES.
MAX_FINAL_VALUES = MAX_FRAME_VALUES // 2


class FinalSignal(BaseException):
    """Ends the cell after FINAL / FINAL_VAR (a BaseException so `except Exception` cannot swallow it)."""


class AnswerDict(dict):  # type: ignore[type-arg]
    """The reference RLM's final-answer protocol: ``answer["content"] = ...; answer["ready"] = True``.

    A plain dict to model code; setting ``ready`` to a true value hands ``content`` to `on_ready`. The cell
    runs on to its end, as in the reference (FINAL, by contrast, ends the cell at once).
    """

    def __init__(self, on_ready: Callable[[Any], None], initial: dict[str, Any] | None = None) -> None:
        super().__init__({"content": "", "ready": False, **(initial or {})})
        self._on_ready = on_ready

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        if key == "ready" and value:
            self._on_ready(self.get("content", ""))

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


def _json_or_none(value: Any) -> Any:
    """`value` when it is JSON of a sendable size, else None (whatever its methods raise)."""
    try:
        text = json.dumps(value)
        if len(text) > MAX_FINAL_VALUE_CHARS or count_values(text.encode(), MAX_FINAL_VALUES) > MAX_FINAL_VALUES:
            return None
    except Exception:  # user objects may raise anything, RecursionError and MemoryError included
        return None
    return value


def _cut_final(text: str) -> str:
    if len(text) <= MAX_FINAL_CHARS:
        return text
    return f"{text[:MAX_FINAL_CHARS]}\n[final answer cut at {MAX_FINAL_CHARS:,} of {len(text):,} characters]"


class Finals:
    """``FINAL``, ``FINAL_VAR`` and the answer dict of one REPL, and the answer they gave.

    Args:
        namespace: The REPL's namespace, where ``FINAL_VAR`` looks a name up.
        scaffold: The REPL's own names: its functions are no answer ``FINAL_VAR`` may return.
    """

    def __init__(self, namespace: dict[str, Any], scaffold: dict[str, Any]) -> None:
        self._namespace = namespace
        self._scaffold = scaffold
        # The final answer given in the current (or last) cell, if any (the REPL clears it per cell).
        self.last: dict[str, Any] | None = None
        # Called with the final answer as soon as FINAL / FINAL_VAR is called, before the cell ends: the
        # worker program sends it to the host at once, so nothing that happens afterwards can lose it.
        self.on_final: Callable[[dict[str, Any]], None] | None = None

    def final(self, answer: Any) -> None:
        """End the run with `answer` as the final answer."""
        self._give(answer, answer if isinstance(answer, str) else safe_text(answer))

    def answer_ready(self, content: Any) -> None:
        """`answer["ready"] = True`: record the final answer; the cell runs on to its end."""
        self._record(content, content if isinstance(content, str) else safe_text(content))

    def final_var(self, name_or_value: Any) -> None:
        """End the run with a variable's value (by name) or with the value itself."""
        value = name_or_value
        if isinstance(name_or_value, str):
            name = name_or_value.strip().strip("'\"")
            # Data (`context`, `context_1`, `history`, ...) may be returned; the REPL's functions may not.
            is_function = name in self._scaffold and callable(self._scaffold[name])
            if name in self._namespace and not is_function:
                value = self._namespace[name]
            elif name.isidentifier():
                raise NameError(
                    f"FINAL_VAR({name!r}): no variable named {name!r} exists in the REPL; assign it "
                    "first, or pass the value itself, or use FINAL(text)"
                )
        if isinstance(value, str):
            text = value
        else:
            try:
                text = json.dumps(value, ensure_ascii=False, indent=2)
            except Exception:
                text = safe_text(value)
        self._give(value, text)

    def _give(self, value: Any, text: str) -> None:
        """Record the answer as text first (nothing after this may lose it), then end the cell."""
        self._record(value, text)
        raise FinalSignal

    def _record(self, value: Any, text: str) -> None:
        """Keep the answer (cut to fit one frame) and announce it to the host at once."""
        if isinstance(value, str) and len(value) > MAX_FINAL_VALUE_CHARS:
            # The host takes the text as the value: a long answer is not sent twice.
            self.last = {"text": _cut_final(text), "value": None, "value_is_text": True}
        else:
            self.last = {"text": _cut_final(text), "value": _json_or_none(value)}
        if self.on_final is not None:
            # Plain try (no context manager: fewer frames under a tiny recursion limit set by the cell);
            # when the frame cannot be sent now, the cell's result frame still carries the answer.
            try:  # noqa: SIM105
                self.on_final(self.last)
            except BaseException:
                pass
