"""The RLM paper's Table 1, and a report that sets a user's run beside it (``rlm eval reproduce --table1``).

Figures are from "Recursive Language Models" (Zhang, Kraska, Khattab), arXiv 2512.24601v1, Table 1: scores
in percent (OOLONG-Pairs: F1 in percent), then the mean API cost in dollars and its standard deviation;
``*`` marks runs that hit input context limits. Later versions of the paper may revise them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlm_adapters.evals.report import group_stats, spread_text
from rlm_adapters.evals.tasks.base import TaskName

# (task, paper column, length used) for the rows this harness runs; the paper's stated input lengths.
RUNNABLE: tuple[tuple[TaskName, str, int], ...] = (
    ("codeqa", "CodeQA (23K-4.2M)", 272_000),
    ("oolong", "OOLONG (131K)", 131_072),
    ("oolong-pairs", "OOLONG-Pairs (32K)", 32_768),
)
NOT_RUNNABLE = {
    "BrowseComp-Plus (1K)": "its corpus of 100K documents and 150 sampled queries are not shipped with this "
    "harness, and the task has no generator here",
    "CodeAct (+ BM25)": "this harness has no CodeAct agent or BM25 retriever arm",
}
# Paper method -> our arm.
METHODS = {
    "Base Model": "direct",
    "Summary agent": "compaction",
    "RLM": "rlm",
    "RLM (no sub-calls)": "rlm-depth0",
}
COLUMNS = ("CodeQA (23K-4.2M)", "BrowseComp-Plus (1K)", "OOLONG (131K)", "OOLONG-Pairs (32K)")


@dataclass(frozen=True)
class Figure:
    """One cell of the paper's table."""

    score: float
    cost: float | None
    cost_std: float | None
    context_limited: bool = False

    def render(self) -> str:
        """``56.50 ($0.43 ± $0.85)``, with ``*`` for context-limited runs."""
        mark = "*" if self.context_limited else ""
        cost = "(N/A)" if self.cost is None else f"(${self.cost:.2f} ± ${self.cost_std or 0:.2f})"
        return f"{self.score:.2f}{mark} {cost}"


def _f(score: float, cost: float | None, std: float | None, limited: bool = False) -> Figure:
    return Figure(score, cost, std, limited)


# model -> method -> column -> figure
PAPER: dict[str, dict[str, dict[str, Figure]]] = {
    "GPT-5 (sub-calls GPT-5-mini)": {
        "Base Model": {
            COLUMNS[0]: _f(24.00, 0.13, 0.07, True),
            COLUMNS[1]: _f(0.00, None, None, True),
            COLUMNS[2]: _f(44.00, 0.14, 0.02),
            COLUMNS[3]: _f(0.04, 0.16, 0.10),
        },
        "CodeAct (+ BM25)": {
            COLUMNS[0]: _f(22.00, 0.06, 0.08, True),
            COLUMNS[1]: _f(51.00, 0.71, 1.20),
            COLUMNS[2]: _f(38.00, 0.61, 1.06),
            COLUMNS[3]: _f(24.67, 0.75, 0.43),
        },
        "Summary agent": {
            COLUMNS[0]: _f(58.00, 1.31, 1.46),
            COLUMNS[1]: _f(70.47, 0.57, 0.10),
            COLUMNS[2]: _f(46.00, 0.13, 0.01),
            COLUMNS[3]: _f(0.01, 0.13, 0.09),
        },
        "RLM": {
            COLUMNS[0]: _f(62.00, 0.11, 0.10),
            COLUMNS[1]: _f(91.33, 0.99, 1.22),
            COLUMNS[2]: _f(56.50, 0.43, 0.85),
            COLUMNS[3]: _f(58.00, 0.33, 0.20),
        },
        "RLM (no sub-calls)": {
            COLUMNS[0]: _f(58.00, 0.18, 0.56),
            COLUMNS[1]: _f(88.00, 0.44, 0.90),
            COLUMNS[2]: _f(36.00, 0.37, 0.42),
            COLUMNS[3]: _f(43.93, 0.69, 1.16),
        },
    },
    "Qwen3-Coder-480B": {
        "Base Model": {
            COLUMNS[0]: _f(20.00, 0.13, 0.08, True),
            COLUMNS[1]: _f(0.00, None, None, True),
            COLUMNS[2]: _f(36.00, 0.06, 0.00),
            COLUMNS[3]: _f(0.06, 0.05, 0.01),
        },
        "CodeAct (+ BM25)": {
            COLUMNS[0]: _f(24.00, 0.17, 0.08, True),
            COLUMNS[1]: _f(12.66, 0.39, 0.50),
            COLUMNS[2]: _f(38.00, 1.51, 1.09),
            COLUMNS[3]: _f(0.28, 1.54, 0.35),
        },
        "Summary agent": {
            COLUMNS[0]: _f(50.00, 1.26, 1.50),
            COLUMNS[1]: _f(38.00, 8.98, 2.12),
            COLUMNS[2]: _f(44.06, 0.15, 0.01),
            COLUMNS[3]: _f(0.31, 0.05, 0.00),
        },
        "RLM": {
            COLUMNS[0]: _f(56.00, 0.92, 1.23),
            COLUMNS[1]: _f(44.66, 0.84, 0.63),
            COLUMNS[2]: _f(48.00, 0.61, 0.49),
            COLUMNS[3]: _f(23.11, 1.02, 0.52),
        },
        "RLM (no sub-calls)": {
            COLUMNS[0]: _f(66.00, 0.18, 0.58),
            COLUMNS[1]: _f(46.00, 0.82, 0.69),
            COLUMNS[2]: _f(43.50, 0.32, 0.13),
            COLUMNS[3]: _f(17.34, 1.77, 1.23),
        },
    },
}


def ours(records: Sequence[dict[str, Any]], task: str, arm: str) -> str:
    """The user's cell: score in percent with its 95% bootstrap interval, the spread across repeats, mean cost ±
    std, cost and latency at p50 / p90, instances x repeats, and the context-limit mark."""
    group = [r for r in records if r["task"] == task and r["arm"] == arm]
    if not group:
        return "not run"
    row = group_stats(group)
    mark = f"* ({row['context_limits']} over the window)" if row["context_limits"] else ""
    spread = "" if spread_text(row) == "-" else f", spread {spread_text(row)}"
    return (
        f"{100 * row['score']:.2f}{mark} [{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]{spread} "
        f"(${row['cost_mean']:.2f} ± ${row['cost_std']:.2f}; p50/p90 ${row['cost_p50']:.2f}/${row['cost_p90']:.2f}, "
        f"{row['seconds_p50']:.0f}s/{row['seconds_p90']:.0f}s), n={row['instances']}x{row['repeats']}"
    )


def report(records: Sequence[dict[str, Any]], meta: dict[str, Any], notes: Sequence[str] = ()) -> str:
    """The Markdown report: for each runnable column and method, the paper's figures beside the user's."""
    lines = ["# Table 1, reproduced", ""]
    lines += [f"- **{key}**: {value}" for key, value in meta.items()]
    lines += [
        "",
        "Paper: arXiv 2512.24601v1, Table 1 (scores in %, OOLONG-Pairs F1 in %; mean cost ± std per task; "
        "`*` = ran into input context limits). Yours: mean score in % with its 95% bootstrap interval over "
        "instances and repeats, the spread of one instance's score across its repeats, mean cost ± std, cost and "
        "latency at p50 / p90, and instances x repeats.",
        "",
    ]
    for task, column, _ in RUNNABLE:
        lines += [f"## {column}", "", "| method | yours | paper: GPT-5 | paper: Qwen3-Coder-480B |"]
        lines.append("|---|---|---|---|")
        for method, arm in METHODS.items():
            paper = [PAPER[model][method][column].render() for model in PAPER]
            lines.append(f"| {method} (`{arm}`) | {ours(records, task, arm)} | {paper[0]} | {paper[1]} |")
        if any(r["arm"] == "routed" for r in records):  # not a method of the paper's: its figures are ours only
            lines.append(f"| Routed RLM (`routed`) | {ours(records, task, 'routed')} | - | - |")
        lines.append("")
    lines += ["## Not run", ""]
    lines += [f"- **{name}**: {why}." for name, why in NOT_RUNNABLE.items()]
    lines += [f"- {note}" for note in notes]
    lines.append("")
    return "\n".join(lines)
