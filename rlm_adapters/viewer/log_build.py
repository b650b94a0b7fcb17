"""A trajectory log as a tree (`log_tree.py`): runs, iterations, cells, sub-call batches and nested runs.

The log is a flat stream of events from every depth of one run, written in the order they happened.
The loop emits a cell's event only when the cell has finished, after the sub-calls and nested runs the
cell made, so those are held as *pending* per run and given to the next cell of that run. Whatever is
still pending at the end of a live (or torn) log belongs to a cell that is still running.

Every field is read through `records.Fields`, which checks its type, so what this module builds holds only
well-typed values (finite numbers, texts that encode as UTF-8) or was refused with a `BadLogError`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlm_adapters.core.adapter_kit import SOURCES_RECORD
from rlm_adapters.viewer.findings import findings_of
from rlm_adapters.viewer.log_reader import BadLogError, Fields, name_of, read_log
from rlm_adapters.viewer.log_tree import Batch, Cell, RootTurn, Run, SubCall, Trajectory
from rlm_adapters.viewer.reference import REFERENCE_KINDS, convert, is_reference

MAX_NESTED_RUNS = 100  # runs nested deeper are refused: the tree is drawn recursively


def _new_run(event: Fields, header: dict[str, Any]) -> Run:
    """A run from its start event (or the first event of a run whose start is missing), header as fallback."""
    config = header.get("config") or {}
    query = event.maybe_text("query") if "query" in event.record else header.get("query")
    context = event.mapping("context_description") or header.get("context") or {}
    return Run(
        run_id=event.text("run_id"),
        depth=event.count("depth"),
        parent_run_id=event.maybe_text("parent_run_id"),
        query=query,
        context=context,
        root_model=event.text("root_model") or config.get("root_model") or "",
        sub_models=event.texts("sub_models") or list(config.get("sub_models") or []),
        start=event.number("time", header.get("time", 0.0)),
        route=event.maybe_text("route") or "rlm",
        route_reason=event.maybe_text("route_reason"),
    )


def clean_header(header: dict[str, Any], where: str) -> dict[str, Any]:
    """The header's fields the viewer uses, checked (`Fields`); the configuration's model names too."""
    fields = Fields(header, where)
    config = fields.mapping("config")
    checked = Fields(config, where, "config.")
    clean: dict[str, Any] = {
        "type": "header",
        "run_id": fields.text("run_id"),
        "query": fields.maybe_text("query"),
        "context": fields.mapping("context"),
        "config": {**config, "root_model": checked.text("root_model"), "sub_models": checked.texts("sub_models")},
    }
    if header.get("time") is not None:
        clean["time"] = fields.number("time")
    if header.get("version") is not None:
        clean["version"] = fields.count("version")
    if header.get("format") is not None:
        clean["format"] = fields.text("format")
    return clean


class _Builder:
    def __init__(self, header: dict[str, Any], name: str) -> None:
        self.header = header
        self.name = name
        self.runs: dict[str, Run] = {}

    def run_of(self, event: Fields) -> Run:
        run_id = event.text("run_id")
        run = self.runs.get(run_id)
        if run is None:
            # An event of a run whose start is missing (a log opened mid-way): adopt it anyway.
            run = self.runs[run_id] = _new_run(event, self.header if not self.runs else {})
            self._attach(run, event)
        return run

    def _attach(self, run: Run, event: Fields) -> None:
        parent = self.runs.get(run.parent_run_id or "")
        if parent is not None and parent is not run:
            run.nesting = parent.nesting + 1
            if run.nesting > MAX_NESTED_RUNS:
                raise BadLogError(
                    f"{event.where}: run {run.run_id[:8]!r} is nested {run.nesting} runs deep; "
                    f"the viewer shows at most {MAX_NESTED_RUNS} levels"
                )
            parent.pending_children.append(run)

    def add(self, event: Fields) -> None:
        kind = event.text("kind")
        now = event.number("time")
        if kind == "run_start":
            run_id = event.text("run_id")
            if run_id not in self.runs:
                run = self.runs[run_id] = _new_run(event, self.header if not self.runs else {})
                self._attach(run, event)
            else:  # a direct prompt the model refused: the same run goes on as an RLM, and says why
                self.runs[run_id].route = event.maybe_text("route") or "rlm"
                self.runs[run_id].route_reason = event.maybe_text("route_reason")
            return
        run = self.run_of(event)
        if kind == "root_call":
            duration = event.number("duration")
            item = run.iteration(event.count("iteration"))
            if item.turn is not None or item.cells:
                # The loop's last forced answer reuses the final iteration number.
                item = run.new_iteration(item.number)
            item.turn = RootTurn(
                messages_sent=event.messages("messages_sent"),
                reply=event.text("reply"),
                model=event.text("model"),
                input_tokens=event.count("input_tokens"),
                output_tokens=event.count("output_tokens"),
                cost=event.number("cost"),
                start=now - duration,
                end=now,
            )
        elif kind == "cell":
            duration = event.number("duration")
            cell = Cell(
                iteration=event.count("iteration"),
                index=event.count("index"),
                code=event.text("code"),
                output=event.text("output"),
                error=event.maybe_text("error"),
                start=now - duration,
                end=now,
                timed_out=event.flag("timed_out"),
                final=event.flag("final"),
            )
            self._settle(run, cell)
            run.iteration(cell.iteration).cells.append(cell)
        elif kind == "sub_call_start":
            call = SubCall(
                call_id=event.text("call_id"),
                kind=event.text("call_kind"),
                model=event.text("model"),
                prompt=event.text("prompt"),
                start=now,
            )
            key = event.text("batch_id") or call.call_id
            batch = run.pending_batches.get(key)
            if batch is None:
                size = max(1, event.count("batch_size"))
                batch = run.pending_batches[key] = Batch(key, call.kind, call.model, size)
            batch.calls.append(call)
            run.calls[call.call_id] = call
        elif kind == "sub_call_end":
            found = run.calls.get(event.text("call_id"))
            if found is not None:
                found.end = now
                found.response = event.text("response")
                found.error = event.maybe_text("error")
                found.input_tokens = event.count("input_tokens")
                found.output_tokens = event.count("output_tokens")
                found.cost = event.number("cost")
                found.duration = event.number("duration", now - found.start)
        elif kind == "budget":
            run.budget_messages.append(event.text("message"))
        elif kind == "final":
            run.response = event.text("response")
            run.finish_reason = event.text("finish_reason") or "final"
            run.usage = event.usage("usage")
            run.error = event.maybe_text("error")
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


def build(
    header: dict[str, Any],
    events: list[dict[str, Any]],
    path: Path | None = None,
    lines: Sequence[int] | None = None,
) -> Trajectory:
    """The tree of a log's header and event records (as `read_trajectory` returns them).

    Args:
        header: The header record (may be empty for a log with a lost first line).
        events: The event records in file order.
        path: Where the log was read from, for display.
        lines: The line of the file each event came from, for errors (without it, errors count events).

    Raises:
        BadLogError: A field holds a value of the wrong type (one line naming the file, line and field).
    """
    name = name_of(path)
    header = clean_header(header, f"{name} line 1 (the header)") if header else {}
    builder = _Builder(header, name)
    findings = None
    for position, record in enumerate(events):
        where = f"{name} line {lines[position]}" if lines is not None else f"{name} event {position + 1}"
        event = Fields(record, where)
        kind = event.text("type", "event")
        if kind == "event":
            builder.add(event)
        elif kind == SOURCES_RECORD:
            findings = findings_of(record)
    builder.finish()
    top_id = header.get("run_id", "")
    root = builder.runs.get(top_id)
    if root is None:
        roots = [run for run in builder.runs.values() if run.parent_run_id is None]
        fallback = Fields({"run_id": top_id, "time": header.get("time")}, name)
        root = roots[0] if roots else _new_run(fallback, header)
        builder.runs.setdefault(root.run_id, root)
    start = header.get("time", root.start)
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
    if isinstance(kind, str) and kind in REFERENCE_KINDS:
        return None
    return (
        f"{name!r} is not a trajectory log: its first line is not a header record "
        '({"type": "header", "run_id": ...}); give a log written by rlm_adapters.RLMLogger (rlm ask --log-dir)'
    )


def load(path: str | Path) -> Trajectory:
    """Read and build the log at `path` (a live log's torn last line is skipped).

    Raises:
        BadLogError: The file cannot be read, a line is not a JSON object, or a field has the wrong type;
            the message is one line naming the file, the line and what is wrong.
    """
    records = read_log(path)
    name = name_of(path)
    for record in records[1:]:
        if record.data.get("type") == "header":
            raise BadLogError(f"{name} line {record.line} is a second header: a trajectory log holds one run")
    if records and records[0].data.get("type") == "header":
        header, events = records[0].data, records[1:]
    else:
        header, events = {}, records
    if not header and is_reference([record.data for record in events]):
        converted_header, converted = convert([record.data for record in events], Path(path))
        return build(converted_header, converted, Path(path), lines=None)
    return build(header, [record.data for record in events], Path(path), lines=[r.line for r in events])
