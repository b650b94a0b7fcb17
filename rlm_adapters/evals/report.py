"""Summaries of an evaluation: a table per task and arm (mean, 95% interval), JSON, a Markdown report and a plot."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from rlm_adapters._extras import require
from rlm_adapters._terminal import safe_text
from rlm_adapters.evals.tokens import format_length

Row = dict[str, Any]
SUMMARY_FILE, REPORT_FILE, PLOT_FILE = "summary.json", "report.md", "score_vs_length.png"


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and 95% interval (normal approximation, clipped to [0, 1]); a single value has no width."""
    if not values:
        return math.nan, math.nan, math.nan
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = 1.96 * sd / math.sqrt(n)
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for fewer than two values)."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def summarize(records: Sequence[dict[str, Any]]) -> list[Row]:
    """One row per (task, arm, length): score mean and 95% interval, cost, tokens, time, failures."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["task"], record["arm"], int(record["length"])), []).append(record)
    # Arms in the order they first appear (the order asked for), lengths ascending.
    arm_order = {arm: i for i, arm in enumerate(dict.fromkeys(r["arm"] for r in records))}
    rows = []
    for (task, arm, length), group in sorted(groups.items(), key=lambda kv: (kv[0][0], arm_order[kv[0][1]], kv[0][2])):
        score, low, high = mean_ci([float(r["score"]) for r in group])
        cost, cost_sd = mean_std([float(r["cost"]) for r in group])
        tokens, _ = mean_std([float(r["input_tokens"] + r["output_tokens"]) for r in group])
        seconds, _ = mean_std([float(r["seconds"]) for r in group])
        rows.append(
            {
                "task": task,
                "arm": arm,
                "length": length,
                "n": len(group),
                "score": score,
                "ci_low": low,
                "ci_high": high,
                "cost_mean": cost,
                "cost_std": cost_sd,
                "tokens_mean": tokens,
                "seconds_mean": seconds,
                "failures": sum(r["status"] != "ok" for r in group),
                "context_limits": sum(r["status"] == "context_limit" for r in group),
            }
        )
    return rows


def _cells(row: Row) -> list[str]:
    failures = str(row["failures"])
    if row["context_limits"]:
        failures += f" ({row['context_limits']} context limit)"
    return [
        row["task"],
        row["arm"],
        format_length(row["length"]),
        str(row["n"]),
        f"{row['score']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]",
        f"${row['cost_mean']:.4f} ± {row['cost_std']:.4f}",
        f"{row['tokens_mean']:,.0f}",
        f"{row['seconds_mean']:.1f}s",
        failures,
    ]


HEADERS = ["task", "arm", "length", "n", "score (95% CI)", "cost (mean ± std)", "tokens", "time", "failures"]


def render_table(rows: Sequence[Row], title: str = "rlm eval") -> Table:
    """A rich table of the summary rows (task and arm names come from the records: shown escaped, never as markup)."""
    table = Table(title=safe_text(title))
    for header in HEADERS:
        table.add_column(header, justify="left" if header in ("task", "arm", "failures") else "right")
    for row in rows:
        table.add_row(*(safe_text(cell, one_line=True) for cell in _cells(row)))
    return table


def markdown(rows: Sequence[Row], meta: dict[str, Any]) -> str:
    """The Markdown report: settings, then the table."""
    lines = ["# rlm eval report", ""]
    lines += [f"- **{key}**: {value}" for key, value in meta.items()]
    lines += ["", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in _cells(row)) + " |" for row in rows]
    lines += ["", f"![score against length]({PLOT_FILE})", ""]
    return "\n".join(lines)


def plot(rows: Sequence[Row], path: Path) -> None:
    """Score against context length, one line per arm and task, with 95% intervals (the paper's Fig. 1)."""
    require("matplotlib", extra="eval", feature="rlm eval plots")
    # The object API with an explicit Agg canvas: no pyplot global state, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    series: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        series.setdefault((row["task"], row["arm"]), []).append(row)
    tasks = {task for task, _ in series}
    for (task, arm), points in sorted(series.items()):
        points = sorted(points, key=lambda r: r["length"])
        xs = [r["length"] for r in points]
        ys = [r["score"] for r in points]
        errors = [[r["score"] - r["ci_low"] for r in points], [r["ci_high"] - r["score"] for r in points]]
        label = arm if len(tasks) == 1 else f"{task} / {arm}"
        axes.errorbar(xs, ys, yerr=errors, marker="o", capsize=3, label=label)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("context length (tokens)")
    axes.set_ylabel("score")
    axes.set_ylim(-0.05, 1.05)
    axes.set_title("score against context length")
    axes.grid(True, alpha=0.3)
    if series:
        axes.legend()
    figure.savefig(path, dpi=120, bbox_inches="tight")


def _jsonable(rows: Sequence[Row]) -> list[Row]:
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()} for row in rows]


def write_reports(records: Sequence[dict[str, Any]], out: Path, meta: dict[str, Any]) -> dict[str, Path]:
    """Write ``summary.json``, ``report.md`` and ``score_vs_length.png`` into `out`; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    rows = summarize(records)
    paths = {"json": out / SUMMARY_FILE, "markdown": out / REPORT_FILE, "plot": out / PLOT_FILE}
    paths["json"].write_text(json.dumps({"meta": meta, "rows": _jsonable(rows)}, indent=2) + "\n", "utf-8")
    paths["markdown"].write_text(markdown(rows, meta), encoding="utf-8")
    plot(rows, paths["plot"])
    return paths
