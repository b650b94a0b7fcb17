"""`RunHandle`: one run started in the background, with its events as a stream, its result and a stop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from rlm_adapters.core.engine.loop_thread import LoopWork
from rlm_adapters.core.events import Event
from rlm_adapters.core.result import RLMResult


class RunHandle(LoopWork[Event, RLMResult]):
    """A run started with `RLM.start` (in the running loop), or on a loop of its own (`on_new_thread`).

    Its events as they happen (`events`, or `iter_events` from sync code), its result (`result`, or `wait`), and
    a way to stop it (`cancel`: the run closes its sandbox and ends ``finish_reason="cancelled"``, its paid calls
    counted), from any thread.

    Args:
        run: Starts the run, given a callback for its events and the event that cancels it.
        cancel_event: The run's cancel event (a fresh one when None).
        thread: The `LoopThread` to run on (None: the running loop).
        own_thread: `thread` is this run's alone, stopped when it ends.
    """

    def events(self) -> AsyncIterator[Event]:
        """Every event of the run (and of its nested runs) in order, ending when the run ends.

        The last one is the top-level `RunFinished`. One consumer at a time; a failure of the run is
        raised by `result`, not here.
        """
        return self.items()

    def iter_events(self) -> Iterator[Event]:
        """`events` for sync code (any thread but the run's own loop's)."""
        return self.iter_items()


__all__ = ["RunHandle"]
