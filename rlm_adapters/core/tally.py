"""`EventTally`: the running totals of a run's event stream, the one reducer behind every progress display.

The CLI's progress line, MCP progress notifications and the ``verbose=True`` console all feed their run's
events to one of these and show what it counts, so that each says the same thing about the same run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from rlm_adapters.core.events import Event, RootCall, RunStarted, SubCallFinished, SubCallStarted

# Moments worth showing at once: a top-level turn ended, a batch of sub-calls went out, calls came back.
Milestone = Literal["iteration", "batch_started", "calls_done"]


@dataclass
class EventTally:
    """What the events of one run tree (nested runs included) report so far; feed it each one with `add`.

    Attributes:
        iteration: The top-level root model's latest turn.
        root_calls: Root model calls, at every depth.
        sub_calls_started: Sub-calls sent out; a batch counts whole when its first call starts, so a
            display reads ``0/120`` at once rather than counting up to the batch's size.
        sub_calls_finished: Sub-calls that came back, failed ones included.
        sub_call_errors: Sub-calls that failed.
        root_calls_cached: Root calls replayed from the call cache.
        sub_calls_cached: Sub-calls replayed from the call cache.
        input_tokens: Input tokens of every root and sub-call.
        output_tokens: Output tokens of every root and sub-call.
        cost: USD of every root and sub-call.
        started: `time.perf_counter()` when the top-level run started (until then, when the tally was made).
    """

    iteration: int = 0
    root_calls: int = 0
    sub_calls_started: int = 0
    sub_calls_finished: int = 0
    sub_call_errors: int = 0
    root_calls_cached: int = 0
    sub_calls_cached: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    started: float = field(default_factory=time.perf_counter)
    _open: dict[str, list[int]] = field(default_factory=dict, repr=False)  # batch or call id -> [finished, size]

    @property
    def tokens(self) -> int:
        """Input and output tokens together."""
        return self.input_tokens + self.output_tokens

    def sub_calls_text(self) -> str:
        """``48 sub-calls`` or, with replays, ``48 sub-calls (40 cached)``: finished ones, as every display says it."""
        text = f"{self.sub_calls_finished} sub-calls"
        return f"{text} ({self.sub_calls_cached} cached)" if self.sub_calls_cached else text

    def progress_line(self, max_iterations: int, *, detail: bool = True) -> str:
        """The run's progress as every display words it (the CLI's line, ``rlm serve``'s stream, MCP's
        notifications): ``iteration 3/30 · 12/48 sub-calls · 51,200 tokens · $0.1234 · 42.0 s``.

        Sub-calls read ``done/started`` while some are still out and are left out before the first. `detail`
        False leaves out the tokens and the clock and rounds the cost to cents (MCP: a client shows its own
        clock, and a notification is for a glance).
        """
        parts = [f"iteration {self.iteration}/{max_iterations}"]
        done, started = self.sub_calls_finished, self.sub_calls_started
        if started:
            parts.append(
                f"{done} sub-call{'s' if done != 1 else ''}" if done >= started else f"{done}/{started} sub-calls"
            )
            if self.sub_calls_cached:
                parts[-1] += f" ({self.sub_calls_cached} cached)"
        if not detail:
            return " · ".join([*parts, f"${self.cost:.2f}"])
        return " · ".join([*parts, f"{self.tokens:,} tokens", f"${self.cost:.4f}", f"{self.elapsed:.1f} s"])

    @property
    def elapsed(self) -> float:
        """Seconds since the top-level run started."""
        return time.perf_counter() - self.started

    def add(self, event: Event) -> Milestone | None:
        """Count `event`; return the milestone it is, if any (a display may refresh at once on one)."""
        if isinstance(event, RunStarted) and event.depth == 0:
            self.started = time.perf_counter()
        elif isinstance(event, RootCall):
            self.root_calls += 1
            self.root_calls_cached += event.cached
            self._spent(event.input_tokens, event.output_tokens, event.cost)
            if event.depth == 0:
                self.iteration = event.iteration
                return "iteration"
        elif isinstance(event, SubCallStarted):
            key = event.batch_id or event.call_id
            if key not in self._open:
                size = max(1, event.batch_size)
                self._open[key] = [0, size]
                self.sub_calls_started += size
                if event.batch_id is not None:
                    return "batch_started"
        elif isinstance(event, SubCallFinished):
            self.sub_calls_finished += 1
            self.sub_call_errors += event.error is not None
            self.sub_calls_cached += event.cached
            self._spent(event.input_tokens, event.output_tokens, event.cost)
            key = event.batch_id or event.call_id
            batch = self._open.get(key)
            if batch is not None:
                batch[0] += 1
                if batch[0] >= batch[1]:
                    del self._open[key]
                    return "calls_done"
        return None

    def _spent(self, input_tokens: int, output_tokens: int, cost: float) -> None:
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cost += cost
