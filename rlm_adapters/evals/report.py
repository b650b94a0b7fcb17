"""Summaries of an evaluation: a table per task, arm and length, JSON, a Markdown report and a plot.

Each row gives the mean score with a 95% bootstrap interval over instances and their repeats (instances drawn
with replacement, then each drawn instance's repeats: a model's run-to-run variance widens it as much as the
choice of instances does), the spread of one instance's score across its repeats (``--repeats``), and cost and
latency at the median and the 90th percentile.
"""

from __future__ import annotations

import json
import math
import random
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


BOOTSTRAP_SAMPLES = 2_000
BOOTSTRAP_SEED = 0  # a fixed seed: the same records give the same interval in every report


def bootstrap_ci(by_instance: Sequence[Sequence[float]], samples: int = BOOTSTRAP_SAMPLES) -> tuple[float, float]:
    """A 95% percentile interval of the mean score, resampling instances, then each drawn instance's repeats.

    Args:
        by_instance: Each instance's scores, one per repeat.
        samples: Bootstrap resamples.
    """
    groups = [list(scores) for scores in by_instance if scores]
    if not groups:
        return math.nan, math.nan
    rng = random.Random(BOOTSTRAP_SEED)
    means = []
    for _ in range(samples):
        total, count = 0.0, 0
        for scores in rng.choices(groups, k=len(groups)):
            drawn = rng.choices(scores, k=len(scores)) if len(scores) > 1 else scores
            total += sum(drawn)
            count += len(drawn)
        means.append(total / count)
    means.sort()
    return percentile(means, 0.025), percentile(means, 0.975)


def percentile(values: Sequence[float], share: float) -> float:
    """The `share` quantile of `values` (linear between the two nearest ranks; NaN for none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    place = share * (len(ordered) - 1)
    low = math.floor(place)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (place - low)


def repeat_spread(by_instance: Sequence[Sequence[float]]) -> float:
    """How much one instance's score moves across its repeats: the mean, over instances run more than once,
    of the standard deviation of their scores (NaN without repeats)."""
    spreads = [mean_std(scores)[1] for scores in by_instance if len(scores) > 1]
    return sum(spreads) / len(spreads) if spreads else math.nan


def group_stats(group: Sequence[dict[str, Any]]) -> Row:
    """The figures of one group of records (one arm at one length, or one Table 1 cell)."""
    by_instance: dict[str, list[float]] = {}
    for record in group:
        by_instance.setdefault(str(record["instance"]), []).append(float(record["score"]))
    scores = [float(r["score"]) for r in group]
    costs = [float(r["cost"]) for r in group]
    seconds = [float(r["seconds"]) for r in group]
    low, high = bootstrap_ci(list(by_instance.values()))
    cost, cost_sd = mean_std(costs)
    tokens, _ = mean_std([float(r["input_tokens"] + r["output_tokens"]) for r in group])
    return {
        "n": len(group),
        "instances": len(by_instance),
        "repeats": max((len(s) for s in by_instance.values()), default=0),
        "score": sum(scores) / len(scores) if scores else math.nan,
        "ci_low": low,
        "ci_high": high,
        "repeat_spread": repeat_spread(list(by_instance.values())),
        "cost_mean": cost,
        "cost_std": cost_sd,
        "cost_p50": percentile(costs, 0.5),
        "cost_p90": percentile(costs, 0.9),
        "seconds_mean": mean_std(seconds)[0],
        "seconds_p50": percentile(seconds, 0.5),
        "seconds_p90": percentile(seconds, 0.9),
        "tokens_mean": tokens,
        "direct_runs": sum((r.get("extra") or {}).get("route") == "direct" for r in group),
        "failures": sum(r["status"] != "ok" for r in group),
        "context_limits": sum(r["status"] == "context_limit" for r in group),
    }


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for fewer than two values)."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def summarize(records: Sequence[dict[str, Any]]) -> list[Row]:
    """One row per (task, arm, length): `group_stats` of its records."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["task"], record["arm"], int(record["length"])), []).append(record)
    # Arms in the order they first appear (the order asked for), lengths ascending.
    arm_order = {arm: i for i, arm in enumerate(dict.fromkeys(r["arm"] for r in records))}
    rows = []
    for (task, arm, length), group in sorted(groups.items(), key=lambda kv: (kv[0][0], arm_order[kv[0][1]], kv[0][2])):
        rows.append({"task": task, "arm": arm, "length": length, **group_stats(group)})
    return rows


def spread_text(row: Row) -> str:
    """The spread across repeats, or a dash without repeats."""
    return "-" if math.isnan(row["repeat_spread"]) else f"±{row['repeat_spread']:.3f}"


def _cells(row: Row) -> list[str]:
    failures = str(row["failures"])
    if row["context_limits"]:
        failures += f" ({row['context_limits']} context limit)"
    if row["direct_runs"]:
        failures += f"; {row['direct_runs']} direct"
    return [
        row["task"],
        row["arm"],
        format_length(row["length"]),
        f"{row['instances']}x{row['repeats']}",
        f"{row['score']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]",
        spread_text(row),
        f"${row['cost_p50']:.4f} / ${row['cost_p90']:.4f}",
        f"{row['seconds_p50']:.1f}s / {row['seconds_p90']:.1f}s",
        f"{row['tokens_mean']:,.0f}",
        failures,
    ]


HEADERS = [
    "task",
    "arm",
    "length",
    "n x repeats",
    "score (95% CI)",
    "spread",
    "cost p50 / p90",
    "latency p50 / p90",
    "tokens",
    "failures",
]


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
