"""A trajectory log as a tree: runs, iterations, cells, sub-call batches and nested runs.

The log is a flat stream of events from every depth of one run, written in the order they happened.
The loop emits a cell's event only when the cell has finished, after the sub-calls and nested runs the
cell made, so those are held as *pending* per run and given to the next cell of that run. Whatever is
still pending at the end of a live (or torn) log belongs to a cell that is still running.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_adapters.core.result import Place
from rlm_adapters.core.trajectory import SOURCES_RECORD, read_trajectory
from rlm_adapters.viewer.reference import REFERENCE_KINDS, convert, is_reference

TRUNCATION_MARK = re.compile(r"\.\.\. \[\+[\d,]+ chars\]$")


def _float(value: Any, default: float = 0.0) -> float:
    return float(value) if isinstance(value, int | float) else default


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


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

    @property
    def finished(self) -> bool:
        """Whether the run's final event is in the log."""
        return self.finish_reason is not None

    def iteration(self, number: int) -> Iteration:
        """The latest iteration numbered `number`, created if missing."""
        for item in reversed(self.iterations):
            if item.number == number:
                return item
        item = Iteration(number)
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
class Findings:
    """What a run's answer rests on, from the log's sources record (written once the run was cited).

    Attributes:
        sources: ``path:lines`` of each cited source, best first.
        unsupported: ``(claim, why)`` for each claim no input that reached a model holds.
        supported: How many claims are supported.
        note: Why there are no sources (or only the ranges read), when the record says.
    """

    sources: list[str] = field(default_factory=list)
    unsupported: list[tuple[str, str]] = field(default_factory=list)
    supported: int = 0
    note: str | None = None


def findings_of(record: dict[str, Any]) -> Findings:
    """The findings of a sources record, whatever a hostile log put in it (bad entries are skipped)."""
    note, sources, claims = record.get("note"), record.get("sources"), record.get("claims")
    found = Findings(note=note if isinstance(note, str) else None)
    for source in sources if isinstance(sources, list) else []:
        if isinstance(source, dict) and isinstance(source.get("path"), str):
            first, last = _int(source.get("line_start")), _int(source.get("line_end"))
            place = source.get("place")
            if isinstance(place, dict) and place.get("kind") in ("page", "slide", "sheet", "cell"):
                where = str(Place(place["kind"], _str(place.get("start")), place.get("end") and _str(place["end"])))
            else:
                where = str(first) if first == last else f"{first}-{last}"
            found.sources.append(f"{source['path']}:{where}")
    for claim in claims if isinstance(claims, list) else []:
        if not isinstance(claim, dict):
            continue
        if claim.get("status") == "supported":
            found.supported += 1
        else:
            found.unsupported.append((_str(claim.get("text")), _str(claim.get("reason"))))
    return found


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


def _new_run(record: dict[str, Any], header: dict[str, Any]) -> Run:
    config = header.get("config") or {}
    return Run(
        run_id=_str(record.get("run_id")),
        depth=_int(record.get("depth")),
        parent_run_id=record.get("parent_run_id"),
        query=record.get("query", header.get("query")),
        context=dict(record.get("context_description") or header.get("context") or {}),
        root_model=_str(record.get("root_model") or config.get("root_model")),
        sub_models=list(record.get("sub_models") or config.get("sub_models") or []),
        start=_float(record.get("time"), _float(header.get("time"))),
    )


class _Builder:
    def __init__(self, header: dict[str, Any]) -> None:
        self.header = header
        self.runs: dict[str, Run] = {}

    def run_of(self, record: dict[str, Any]) -> Run:
        run_id = _str(record.get("run_id"))
        run = self.runs.get(run_id)
        if run is None:
            # An event of a run whose start is missing (a log opened mid-way): adopt it anyway.
            run = self.runs[run_id] = _new_run(record, self.header if not self.runs else {})
            self._attach(run)
        return run

    def _attach(self, run: Run) -> None:
        parent = self.runs.get(run.parent_run_id or "")
        if parent is not None and parent is not run:
            parent.pending_children.append(run)

    def add(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        now = _float(record.get("time"))
        if kind == "run_start":
            run_id = _str(record.get("run_id"))
            if run_id not in self.runs:
                run = self.runs[run_id] = _new_run(record, self.header if not self.runs else {})
                self._attach(run)
            return
        run = self.run_of(record)
        if kind == "root_call":
            duration = _float(record.get("duration"))
            item = run.iteration(_int(record.get("iteration")))
            if item.turn is not None or item.cells:
                # The loop's last forced answer reuses the final iteration number.
                item = Iteration(item.number)
                run.iterations.append(item)
            item.turn = RootTurn(
                messages_sent=list(record.get("messages_sent") or []),
                reply=_str(record.get("reply")),
                model=_str(record.get("model")),
                input_tokens=_int(record.get("input_tokens")),
                output_tokens=_int(record.get("output_tokens")),
                cost=_float(record.get("cost")),
                start=now - duration,
                end=now,
            )
        elif kind == "cell":
            duration = _float(record.get("duration"))
            cell = Cell(
                iteration=_int(record.get("iteration")),
                index=_int(record.get("index")),
                code=_str(record.get("code")),
                output=_str(record.get("output")),
                error=record.get("error"),
                start=now - duration,
                end=now,
                timed_out=bool(record.get("timed_out")),
                final=bool(record.get("final")),
            )
            self._settle(run, cell)
            run.iteration(cell.iteration).cells.append(cell)
        elif kind == "sub_call_start":
            call = SubCall(
                call_id=_str(record.get("call_id")),
                kind=_str(record.get("call_kind")),
                model=_str(record.get("model")),
                prompt=_str(record.get("prompt")),
                start=now,
            )
            key = _str(record.get("batch_id") or call.call_id)
            batch = run.pending_batches.get(key)
            if batch is None:
                size = max(1, _int(record.get("batch_size")))
                batch = run.pending_batches[key] = Batch(key, call.kind, call.model, size)
            batch.calls.append(call)
            run.calls[call.call_id] = call
        elif kind == "sub_call_end":
            found = run.calls.get(_str(record.get("call_id")))
            if found is not None:
                found.end = now
                found.response = _str(record.get("response"))
                found.error = record.get("error")
                found.input_tokens = _int(record.get("input_tokens"))
                found.output_tokens = _int(record.get("output_tokens"))
                found.cost = _float(record.get("cost"))
                found.duration = _float(record.get("duration"), now - found.start)
        elif kind == "budget":
            run.budget_messages.append(_str(record.get("message")))
        elif kind == "final":
            run.response = _str(record.get("response"))
            run.finish_reason = _str(record.get("finish_reason")) or "final"
            run.usage = dict(record.get("usage") or {})
            run.error = record.get("error")
            run.end = now

    @staticmethod
    def _settle(run: Run, cell: Cell) -> None:
        cell.batches = list(run.pending_batches.values())
        cell.children = run.pending_children
        run.pending_batches = {}
        run.pending_children = []
        # A cell's logged duration is measured in the worker and its event is stamped on the host, so
        # widen its span to cover what it made: the timeline then draws children inside their cell.
        cell.start = min([cell.start, *(b.start for b in cell.batches), *(c.start for c in cell.children)])
        cell.end = max([cell.end, *(b.end for b in cell.batches), *(c.end or c.start for c in cell.children)])

    def finish(self) -> None:
        for run in self.runs.values():
            if not run.pending_batches and not run.pending_children:
                continue
            number = run.iterations[-1].number if run.iterations else 1
            times = [b.start for b in run.pending_batches.values()] + [c.start for c in run.pending_children]
            cell = Cell(number, 0, "", "", None, start=min(times), end=max(times), running=not run.finished)
            self._settle(run, cell)
            run.iteration(number).cells.append(cell)


def build(header: dict[str, Any], events: list[dict[str, Any]], path: Path | None = None) -> Trajectory:
    """The tree of a log's header and event records (as `read_trajectory` returns them).

    Args:
        header: The header record (may be empty for a log with a lost first line).
        events: The event records in file order.
        path: Where the log was read from, for display.
    """
    builder = _Builder(header)
    findings = None
    for record in events:
        if record.get("type", "event") == "event":
            builder.add(record)
        elif record.get("type") == SOURCES_RECORD:
            findings = findings_of(record)
    builder.finish()
    top_id = _str(header.get("run_id"))
    root = builder.runs.get(top_id)
    if root is None:
        roots = [run for run in builder.runs.values() if run.parent_run_id is None]
        root = roots[0] if roots else _new_run({"run_id": top_id, "time": header.get("time")}, header)
        builder.runs.setdefault(root.run_id, root)
    start = _float(header.get("time"), root.start)
    return Trajectory(
        path=path, header=header, root=root, runs=builder.runs, start=min(start, root.start), findings=findings
    )


HEADER_LIMIT = 4 * 1024**2  # a header holds the configuration and a context description, never the context


def trajectory_problem(path: str | Path) -> str | None:
    """Why the file at `path` is not a trajectory log of this library, in one line; None when it is one.

    A trajectory starts with a header record (``{"type": "header", "run_id": ...}``), or is a log of the
    reference RLM (alexzhang13/rlm: a ``metadata`` or ``iteration`` record first), which `load` converts;
    anything else (a binary file, plain text, another program's JSON Lines) is refused before it could be
    shown as an empty run.
    """
    name = str(path)
    try:
        with Path(path).open("rb") as handle:
            first = handle.readline(HEADER_LIMIT)
    except OSError as exc:
        return f"cannot read {name!r}: {exc.strerror}"
    if not first.strip():
        return f"{name!r} is empty, not a trajectory log (a log starts with a header line as soon as a run starts)"
    try:
        record = json.loads(first.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"{name!r} is not a trajectory log: its first line is not JSON (logs are JSON Lines from RLMLogger)"
    kind = record.get("type") if isinstance(record, dict) else None
    if kind == "header" and isinstance(record.get("run_id"), str):
        return None
    if kind in REFERENCE_KINDS:
        return None
    return (
        f"{name!r} is not a trajectory log: its first line is not a header record "
        '({"type": "header", "run_id": ...}); give a log written by rlm_adapters.RLMLogger (rlm ask --log-dir)'
    )


def load(path: str | Path) -> Trajectory:
    """Read and build the log at `path` (a live log's torn last line is skipped)."""
    header, events = read_trajectory(path)
    if not header and is_reference(events):
        header, events = convert(events, Path(path))
    return build(header, events, Path(path))
