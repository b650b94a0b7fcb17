"""A run whose answer rests on one line, and a way to hold its sources phase open (issue 47's tests).

`held_claims` holds every `SourceTracker` at its claim checks (its sources found) until the returned event is
set: a test then sees what a bound or a signal does to a sources phase still at work, without sleeping.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rlm_adapters.sources import _tracker

TEXT = "".join(f"an ordinary filler line, number {n}\n" for n in range(200))
TEXT += "the vault code is QUEBEC-7731 for the north door\n" + TEXT
FIND = "```repl\nprint(llm_query(context.splitlines()[200]))\n```"
ANSWER = "The code is QUEBEC-7731, and 4242 doors were counted."


@contextlib.contextmanager
def held_claims(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Hold the claim checks of every `SourceTracker` until the event is set (set on leaving, at the latest)."""
    opened = threading.Event()
    check = _tracker.check

    def held(*args: Any, **kwargs: Any) -> Any:
        opened.wait(timeout=60)
        return check(*args, **kwargs)

    monkeypatch.setattr(_tracker, "check", held)
    try:
        yield opened
    finally:
        opened.set()  # the thread a test left behind ends
