"""The benchmarks' output: a table on stdout, ``results.json``, and ``growth.png`` (scenario 5)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# name prefix -> (what the target is against, bound): "floor" ratios are ours / floor (at most the bound),
# "reference" ratios are reference / ours (at least the bound), "peers" ratios are ours / the fastest peer in
# the same run (at most the bound), "seconds" bounds our median itself (at most the bound).
TARGETS: dict[str, list[tuple[str, float]]] = {
    "fan-out 64": [("floor", 1.15), ("reference", 3.0), ("peers", 1.0)],
    "fan-out 1000": [("floor", 1.15)],
    "nested": [("reference", 5.0)],
    "overhead/run": [("reference", 10.0)],
    "overhead/fan-out 64": [("seconds", 0.25), ("peers", 1.0)],
    "overhead/nested": [("reference", 10.0)],
}
PEER_ARMS = ("minrlm", "rlmflow")
_LABELS = {"floor": "ours/floor", "reference": "ref/ours", "peers": "ours/peer", "seconds": "ours"}
MEMORY_TARGET = 1.5  # host peak over baseline, per byte of context
LOG_TARGET_BYTES = 1_000_000


@dataclass
class Summary:
    """What `write` produced."""

    table: str
    json_path: Path
    plot_path: Path | None
    failures: list[str] = field(default_factory=list)


def _fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.1f} ms" if unit == "s" and value < 1 else f"{value:.2f} {unit}"


def _targets(name: str) -> list[tuple[str, float]]:
    return next((t for prefix, t in TARGETS.items() if name.startswith(prefix)), [])


def timing_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per-scenario medians, the nested overhead net of a plain run, ratios and verdicts."""
    plain = next((r for r in results if r["name"] == "overhead/run"), None)
    rows = []
    for result in (r for r in results if r["kind"] == "timing"):
        medians = {arm: data["median"] for arm, data in result["arms"].items()}
        if result.get("per", 1) > 1 and plain is not None:
            for arm, value in medians.items():
                base = plain["arms"].get(arm, {}).get("median")
                medians[arm] = None if value is None or base is None else (value - base) / result["per"]
        ours, ref, floor = medians.get("ours"), medians.get("reference"), medians.get("floor")
        peer_medians = [v for arm in PEER_ARMS if (v := medians.get(arm)) is not None]
        fastest_peer = min(peer_medians) if peer_medians else None
        ratios = {
            "ours/floor": ours / floor if ours and floor else None,
            "reference/ours": ref / ours if ours and ref else None,
            "ours/fastest peer": ours / fastest_peer if ours and fastest_peer else None,
        }
        by_kind = {
            "floor": ratios["ours/floor"],
            "reference": ratios["reference/ours"],
            "peers": ratios["ours/fastest peer"],
            "seconds": ours,
        }
        verdicts = []
        for against, bound in _targets(result["name"]):
            ratio = by_kind[against]
            at_least = against == "reference"
            met = None if ratio is None else (ratio >= bound if at_least else ratio <= bound)
            verdicts.append(
                {"target": f"{_LABELS[against]} {'>=' if at_least else '<='} {bound:g}", "ratio": ratio, "met": met}
            )
        errors = [e for data in result["arms"].values() for e in data["errors"]]
        rows.append(
            {
                "name": result["name"],
                "medians": medians,
                "ratios": ratios,
                "targets": verdicts,
                "errors": errors,
            }
        )
    return rows


def _fit(points: list[tuple[float, float]]) -> float | None:
    """The exponent b of y = a x^b, fitted on the points at 8 MiB and above when there are three."""
    usable = [(x, y) for x, y in points if x > 0 and y > 0]
    large = [(x, y) for x, y in usable if x >= 8]
    usable = large if len(large) >= 3 else usable
    if len(usable) < 2:
        return None
    xs = [math.log(x) for x, _ in usable]
    ys = [math.log(y) for _, y in usable]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return None if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def growth_exponents(points: list[dict[str, Any]]) -> dict[str, float | None]:
    """Exponents of time, host memory over baseline, worker memory and log size against context size."""
    ok = [p for p in points if not p.get("error")]
    size = [p["context_mib"] for p in ok]
    host = [p["host_peak_rss_mib"] - p["host_baseline_rss_mib"] for p in ok]
    return {
        "time": _fit(list(zip(size, [p["seconds"] for p in ok], strict=True))),
        "host_memory": _fit(list(zip(size, host, strict=True))),
        "worker_memory": _fit(list(zip(size, [p["children_peak_rss_mib"] for p in ok], strict=True))),
        "log_size": _fit(list(zip(size, [float(p["log_bytes"]) for p in ok], strict=True))),
    }


def _worker(mib: float) -> str:
    return f"{mib:.0f} MiB" if mib > 0 else "- (none)"


def _size_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        f"\n{result['name']}: {result['title']}",
        f"{'side':<10} {'MiB':>7} {'time':>10} {'host peak':>11} {'(peak-base)/ctx':>16} "
        f"{'worker peak':>12} {'log':>12}",
    ]
    for p in result["points"]:
        if p.get("error"):
            lines.append(f"{p['side']:<10} {p['mb']:>7g} FAILED: {p['error'][:200]}")
            continue
        lines.append(
            f"{p['side']:<10} {p['context_mib']:>7.0f} {_fmt(p['seconds']):>10} "
            f"{p['host_peak_rss_mib']:>7.0f} MiB "
            f"{p['host_over_baseline_per_context']:>15.2f}x {_worker(p['children_peak_rss_mib']):>12} "
            f"{p['log_bytes'] / 1024:>9.1f} KiB"
        )
    return lines


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> tuple[str, list[str], dict[str, Any]]:
    """The table, the failures, and the derived numbers for the JSON file."""
    rows = timing_rows(results)
    failures = [f"{r['name']}: {e}" for r in rows for e in r["errors"]]
    columns = ("ours", "reference", *PEER_ARMS, "floor", "threads", "ours/floor")
    head = f"{'scenario':<19} " + " ".join(f"{c:>10}" for c in columns) + f" {'ref/ours':>9} {'ours/peer':>9}  targets"
    lines = [head, "-" * len(head)]
    for row in rows:
        m, q = row["medians"], row["ratios"]
        verdict = "; ".join(
            f"{t['target']}: {'MET' if t['met'] else 'MISSED' if t['met'] is not None else 'n/a'}"
            for t in row["targets"]
        )
        arms = " ".join(
            f"{_fmt(m.get(arm)):>10}" for arm in ("ours", "reference", *PEER_ARMS, "floor", "floor-threads")
        )
        lines.append(
            f"{row['name']:<19} {arms} {_fmt(q['ours/floor'], 'x'):>10} {_fmt(q['reference/ours'], 'x'):>9} "
            f"{_fmt(q['ours/fastest peer'], 'x'):>9}  {verdict}"
        )
    derived: dict[str, Any] = {"timing": rows}
    for result in (r for r in results if r["kind"] != "timing"):
        failures += [
            f"{result['name']} {p['side']} {p['mb']:g} MiB: {p['error']}" for p in result["points"] if p.get("error")
        ]
        lines += _size_lines(result)
        if result["kind"] == "growth":
            exponents = growth_exponents([p for p in result["points"] if p["side"] == "ours"])
            derived["growth_exponents"] = exponents
            lines.append(
                "exponents (size >= 8 MiB when measured): "
                + ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} -" for k, v in exponents.items())
            )
        if result["kind"] == "context":
            largest = max(
                (p for p in result["points"] if p["side"] == "ours" and not p.get("error")),
                key=lambda p: p["context_mib"],
                default=None,
            )
            if largest is not None:
                memory_ok = largest["host_over_baseline_per_context"] <= MEMORY_TARGET
                log_ok = largest["log_bytes"] < LOG_TARGET_BYTES
                derived["context_targets"] = {
                    "context_mib": largest["context_mib"],
                    "memory_met": memory_ok,
                    "log_met": log_ok,
                }
                lines.append(
                    f"targets at {largest['context_mib']:.0f} MiB: host (peak-baseline)/context <= "
                    f"{MEMORY_TARGET}: {'MET' if memory_ok else 'MISSED'}; "
                    f"log < 1 MB: {'MET' if log_ok else 'MISSED'}"
                )
    if meta.get("reference_skipped"):
        lines.append(f"\nreference arm skipped: {meta['reference_skipped']}")
    for name, why in (meta.get("peers_skipped") or {}).items():
        lines.append(f"{name} arm skipped: {why}")
    lines.append(f"load average during the run: {', '.join(f'{x:.2f}' for x in meta['load_average'])}")
    return "\n".join(lines), failures, derived


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Scenario 5 on log-log axes: time, memory and log size against the context's size (None without matplotlib)."""
    try:
        import matplotlib
    except ImportError:  # the plot needs the bench extra; the table and the JSON file do not
        return None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = sorted((p for p in result["points"] if not p.get("error")), key=lambda p: p["context_mib"])
    if not ok:
        return None
    size = [p["context_mib"] for p in ok]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    series = [
        ("wall time (s)", [("run", [p["seconds"] for p in ok])]),
        (
            "peak memory (MiB)",
            [
                ("host", [p["host_peak_rss_mib"] for p in ok]),
                ("host - baseline", [p["host_peak_rss_mib"] - p["host_baseline_rss_mib"] for p in ok]),
                ("worker", [p["children_peak_rss_mib"] for p in ok]),
            ],
        ),
        ("trajectory log (KiB)", [("log", [p["log_bytes"] / 1024 for p in ok])]),
    ]
    for axis, (title, lines) in zip(axes, series, strict=True):
        for label, values in lines:
            axis.plot(size, values, marker="o", label=label)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        low = min(v for _, values in lines for v in values if v > 0)
        high = max(v for _, values in lines for v in values)
        axis.set_ylim(low / 3, max(high * 3, low * 100))  # a flat line must look flat, not zoomed-in noise
        axis.set_xlabel("context (MiB)")
        axis.set_title(title)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    fig.suptitle("rlm-adapters: cost as the context doubles (three-turn run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write(results: list[dict[str, Any]], meta: dict[str, Any], out: Path) -> Summary:
    """Write ``results.json`` and ``growth.png`` into `out`; return the table and any failures."""
    out.mkdir(parents=True, exist_ok=True)
    table, failures, derived = render(results, meta)
    json_path = out / "results.json"
    json_path.write_text(json.dumps({"meta": meta, "results": results, "derived": derived}, indent=2, default=str))
    growth = next((r for r in results if r["kind"] == "growth"), None)
    plot_path = plot(growth, out / "growth.png") if growth is not None else None
    return Summary(table, json_path, plot_path, failures)
