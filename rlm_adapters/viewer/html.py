"""The trajectory as one self-contained HTML page (`rlm view RUN.jsonl --html out.html`).

The page carries its script, its styles and the run's data inline, and its Content-Security-Policy
forbids every fetch, so it can be mailed, archived or opened offline. The data is embedded as JSON in a
`<script type="application/json">` element with `<`, `>` and `&` escaped, so no text from the run (a
prompt containing `</script>`, say) can end the element early. Should an escape ever slip, the policy
still runs no script but the viewer's own: `script-src` allows only its SHA-256 hash, not inline scripts
in general, and no inline event handler.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from rlm_adapters.viewer.log_build import load
from rlm_adapters.viewer.log_reader import clean_text
from rlm_adapters.viewer.log_tree import Batch, Cell, Run, Trajectory

CSP = "default-src 'none'; script-src {script}; style-src 'unsafe-inline'; img-src data:"

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<div id="app"><p class="loading">Loading the trajectory…</p></div>
<script type="application/json" id="rlm-data">{data}</script>
<script>{js}</script>
</body>
</html>
"""


def _asset(name: str) -> str:
    return resources.files("rlm_adapters.viewer").joinpath("assets", name).read_text(encoding="utf-8")


def script_hash(js: str) -> str:
    """The CSP source that allows exactly the inline script `js` (``'sha256-...'``)."""
    return f"'sha256-{base64.b64encode(hashlib.sha256(js.encode('utf-8')).digest()).decode('ascii')}'"


def embed_json(value: Any) -> str:
    """`value` as JSON that is safe inside a `<script>` element (no `<`, `>`, `&` or line separators).

    Raises:
        ValueError: `value` holds NaN or an infinity, which JSON cannot carry (the page would not load).
    """
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _html_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


class _Payload:
    """Flat tables (runs, turns, cells, batches, calls) with times in seconds from the log's start.

    Flat tables keep the JSON small and let the page build any part of the tree on demand by index.
    """

    def __init__(self, trajectory: Trajectory) -> None:
        self.t0 = trajectory.start
        self.runs: list[dict[str, Any]] = []
        self.turns: list[dict[str, Any]] = []
        self.cells: list[dict[str, Any]] = []
        self.batches: list[dict[str, Any]] = []
        self.calls: list[dict[str, Any]] = []
        self._run(trajectory.root, None)

    def _t(self, value: float) -> float:
        return round(value - self.t0, 6)

    def _run(self, run: Run, parent: int | None) -> None:
        index = len(self.runs)
        entry: dict[str, Any] = {
            "id": run.run_id,
            "depth": run.depth,
            "parent": parent,
            "query": run.query or "",
            "model": run.root_model,
            "route": run.route,
            "why": run.route_reason,
            "context": run.context,
            "finish": run.finish_reason,
            "response": run.response,
            "error": run.error,
            "usage": run.usage,
            "s": self._t(run.start),
            "e": self._t(run.end) if run.end is not None else None,
            "iterations": [],
        }
        self.runs.append(entry)
        for item in run.iterations:
            turn_index: int | None = None
            if item.turn is not None:
                turn = item.turn
                turn_index = len(self.turns)
                self.turns.append(
                    {
                        "run": index,
                        "it": item.number,
                        "s": self._t(turn.start),
                        "e": self._t(turn.end),
                        "model": turn.model,
                        "in": turn.input_tokens,
                        "out": turn.output_tokens,
                        "cost": turn.cost,
                        "reply": turn.reply,
                        "sent": turn.messages_sent,
                    }
                )
            cell_indexes = [self._cell(cell, index) for cell in item.cells]
            entry["iterations"].append({"n": item.number, "turn": turn_index, "cells": cell_indexes})

    def _cell(self, cell: Cell, run: int) -> int:
        index = len(self.cells)
        entry: dict[str, Any] = {
            "run": run,
            "it": cell.iteration,
            "i": cell.index,
            "s": self._t(cell.start),
            "e": self._t(cell.end),
            "code": cell.code,
            "output": cell.output,
            "error": cell.error,
            "running": cell.running,
            "timedOut": cell.timed_out,
            "final": cell.final,
            "batches": [],
            "children": [],
        }
        self.cells.append(entry)
        entry["batches"] = [self._batch(batch, index) for batch in cell.batches]
        for child in cell.children:
            entry["children"].append(len(self.runs))
            self._run(child, run)
        return index

    def _batch(self, batch: Batch, cell: int) -> int:
        index = len(self.batches)
        first = len(self.calls)
        for call in batch.calls:
            self.calls.append(
                {
                    "b": index,
                    "s": self._t(call.start),
                    "e": self._t(call.end) if call.end is not None else None,
                    "prompt": call.prompt,
                    "response": call.response,
                    "error": call.error,
                    "in": call.input_tokens,
                    "out": call.output_tokens,
                    "cost": call.cost,
                    "d": round(call.duration, 6),
                }
            )
        self.batches.append(
            {
                "cell": cell,
                "run": self.cells[cell]["run"],
                "kind": batch.kind,
                "model": batch.model,
                "size": batch.size,
                "s": self._t(batch.start),
                "e": self._t(batch.end),
                "first": first,
                "count": len(batch.calls),
                "finished": batch.finished,
                "errors": batch.errors,
            }
        )
        return index


def payload(trajectory: Trajectory) -> dict[str, Any]:
    """The data the page renders: a header and flat tables of runs, turns, cells, batches and calls."""
    tables = _Payload(trajectory)
    return {
        "version": 1,
        "source": clean_text(str(trajectory.path)) if trajectory.path is not None else None,
        "header": {
            "run_id": trajectory.header.get("run_id", trajectory.root.run_id),
            "query": trajectory.header.get("query"),
            "config": trajectory.header.get("config") or {},
            "time": trajectory.start,
        },
        "finished": trajectory.finished,
        "duration": round(trajectory.end - trajectory.start, 6),
        "runs": tables.runs,
        "turns": tables.turns,
        "cells": tables.cells,
        "batches": tables.batches,
        "calls": tables.calls,
        "findings": None if trajectory.findings is None else dataclasses.asdict(trajectory.findings),
    }


def bar_count(trajectory: Trajectory) -> int:
    """How many bars the page's timeline draws: every root turn, cell and sub-call batch of every run."""
    return sum(
        sum(item.turn is not None for item in run.iterations) + len(run.cells()) + len(run.batches())
        for run in trajectory.all_runs()
    )


def render_html(trajectory: Trajectory) -> str:
    """The whole page for `trajectory`, as a string."""
    js = _asset("viewer.js")
    if "</script" in js.lower():
        raise RuntimeError("viewer.js must not contain '</script'; it is inlined into the page")
    title = f"RLM run {str(trajectory.root.run_id)[:8]}"
    if trajectory.root.query:
        title += f": {trajectory.root.query[:80]}"
    return _TEMPLATE.format(
        csp=CSP.format(script=script_hash(js)),
        title=_html_text(title),
        css=_asset("viewer.css"),
        data=embed_json(payload(trajectory)),
        js=js,
    )


def write_html(log_path: str | Path, out_path: str | Path) -> Path:
    """Write the self-contained page of the log at `log_path` to `out_path`.

    Args:
        log_path: A trajectory log (JSONL), finished or still being written.
        out_path: The HTML file to write (its folder is created if missing).

    Returns:
        The path written.
    """
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(load(log_path)), encoding="utf-8")
    return out
