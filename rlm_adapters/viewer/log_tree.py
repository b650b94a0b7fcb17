"""The nodes of a trajectory log's tree: runs, iterations, root turns, cells, sub-call batches and calls.

`model.build` makes them from a log's events, checked field by field; the terminal view, the HTML page
and the exporter read them.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_adapters.viewer.findings import Findings

TRUNCATION_MARK = re.compile(r"\.\.\. \[\+[\d,]+ chars\]$")


def is_truncated(text: str) -> bool:
    """Whether the log cut `text` (it ends with the `... [+N chars]` marker)."""
    return bool(TRUNCATION_MARK.search(text))


@dataclass
class SubCall:
    """One `llm_query` / `rlm_query` / tool call made from the REPL."""

    call_id: str
    kind: str
    model: str
    prompt: str
    start: float
    end: float | None = None
    response: str | None = None
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    duration: float = 0.0


@dataclass
class Batch:
    """Sub-calls made together (one `llm_query_batched`), or a single unbatched call."""

    batch_id: str
    kind: str
    model: str
    size: int
    calls: list[SubCall] = field(default_factory=list)

    @property
    def start(self) -> float:
        """When the first call of the batch left."""
        return min(call.start for call in self.calls)

    @property
    def end(self) -> float:
        """When the last finished call came back (its start if none has)."""
        return max(call.end if call.end is not None else call.start for call in self.calls)

    @property
    def finished(self) -> int:
        """How many calls have come back."""
        return sum(call.end is not None for call in self.calls)

    @property
    def errors(self) -> int:
        """How many calls failed."""
        return sum(call.error is not None for call in self.calls)

    def latencies(self) -> tuple[float, float, float] | None:
        """Min, median and max duration of the finished calls."""
        done = [call.duration for call in self.calls if call.end is not None]
        if not done:
            return None
        return min(done), statistics.median(done), max(done)

    def tokens(self) -> tuple[int, int]:
        """Input and output tokens of the finished calls."""
        return sum(c.input_tokens for c in self.calls), sum(c.output_tokens for c in self.calls)

    @property
    def cost(self) -> float:
        """Cost of the finished calls."""
        return sum(call.cost for call in self.calls)


@dataclass
class Cell:
    """One code block run in the REPL, with the sub-calls and nested runs it made."""

    iteration: int
    index: int
    code: str
    output: str
    error: str | None
    start: float
    end: float
    running: bool = False
    timed_out: bool = False
    final: bool = False
    batches: list[Batch] = field(default_factory=list)
    children: list[Run] = field(default_factory=list)


@dataclass
class RootTurn:
    """The root model's answer for one iteration."""

    messages_sent: list[dict[str, str]]
    reply: str
    model: str
    input_tokens: int
    output_tokens: int
    cost: float
    start: float
    end: float


@dataclass
class Iteration:
    """One turn of a run: the root model's reply and the cells it ran."""

    number: int
    turn: RootTurn | None = None
    cells: list[Cell] = field(default_factory=list)


@dataclass
class Run:
    """One RLM, at depth 0 or nested under a cell of its parent."""

    run_id: str
    depth: int
    parent_run_id: str | None
    query: str | None
    context: dict[str, Any]
    root_model: str
    sub_models: list[str]
    start: float
    iterations: list[Iteration] = field(default_factory=list)
    response: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    end: float | None = None
    budget_messages: list[str] = field(default_factory=list)
    pending_batches: dict[str, Batch] = field(default_factory=dict)
    pending_children: list[Run] = field(default_factory=list)
    calls: dict[str, SubCall] = field(default_factory=dict)
    nesting: int = 0  # how many runs this one is nested under in the log (its depth as the tree shows it)
    route: str = "rlm"  # ``direct``: one plain call to the root model (``direct_below_tokens``)
    route_reason: str | None = None  # why: the prompt's tokens against the threshold (or the fallback)
    _latest: dict[int, Iteration] = field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        """Whether the run's final event is in the log."""
        return self.finish_reason is not None

    def iteration(self, number: int) -> Iteration:
        """The latest iteration numbered `number`, created if missing."""
        found = self._latest.get(number)
        return found if found is not None else self.new_iteration(number)

    def new_iteration(self, number: int) -> Iteration:
        """A new iteration numbered `number`, which later lookups of that number find."""
        item = self._latest[number] = Iteration(number)
        self.iterations.append(item)
        return item

    def cells(self) -> list[Cell]:
        """Every cell of this run, in order."""
        return [cell for item in self.iterations for cell in item.cells]

    def batches(self) -> list[Batch]:
        """Every sub-call batch of this run (not of nested runs), in order."""
        return [batch for cell in self.cells() for batch in cell.batches]

    def children(self) -> list[Run]:
        """The runs nested directly under this one."""
        return [child for cell in self.cells() for child in cell.children]


@dataclass
class Trajectory:
    """A whole log: its header, the tree of runs and, once the run was cited, its findings."""

    path: Path | None
    header: dict[str, Any]
    root: Run
    runs: dict[str, Run]
    start: float
    findings: Findings | None = None

    @property
    def finished(self) -> bool:
        """Whether the top-level run has ended (a live log has not)."""
        return self.root.finished

    def all_runs(self) -> list[Run]:
        """Every run, parents before their children."""
        out: list[Run] = []
        stack = [self.root]
        while stack:
            run = stack.pop()
            out.append(run)
            stack.extend(reversed(run.children()))
        return out

    @property
    def end(self) -> float:
        """The latest time anything in the log happened."""
        times = [self.start]
        for run in self.runs.values():
            times.append(run.end or run.start)
            for item in run.iterations:
                if item.turn is not None:
                    times.append(item.turn.end)
                times.extend(cell.end for cell in item.cells)
                times.extend(batch.end for cell in item.cells for batch in cell.batches)
        return max(times)
