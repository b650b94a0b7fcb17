"""How fast the trajectory page renders a 10,000-sub-call log in headless Chromium (printed, not asserted).

Run as ``python -m benchmarks.viewer_bench``. Needs the ``playwright`` package and Debian's ``chromium``.
The log is synthetic but shaped like a real one: 20 root turns, each running one cell that sends five
batches of 100 ``llm_query`` calls, plus one nested run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rlm_adapters.viewer.html import bar_count, write_html
from rlm_adapters.viewer.log_build import load

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def synthetic_log(path: Path, iterations: int = 20, batches: int = 5, per_batch: int = 100) -> int:
    """Write a log with `iterations * batches * per_batch` sub-calls; returns that count."""
    run_id, nested_id = "f" * 32, "e" * 32
    now = 1_800_000_000.0
    records: list[dict[str, Any]] = [
        {
            "type": "header",
            "version": 1,
            "run_id": run_id,
            "time": now,
            "query": "Count the needles",
            "context": {"type": "str", "total_chars": 50_000_000},
            "config": {"root_model": "big", "sub_models": ["small"]},
        },
        {
            "type": "event",
            "kind": "run_start",
            "run_id": run_id,
            "depth": 0,
            "parent_run_id": None,
            "time": now,
            "query": "Count the needles",
            "context_description": {"type": "str"},
            "root_model": "big",
            "sub_models": ["small"],
        },
    ]
    base = {"type": "event", "run_id": run_id, "depth": 0, "parent_run_id": None}
    t, calls = now, 0
    for it in range(1, iterations + 1):
        t += 2.0
        records.append(
            {
                **base,
                "kind": "root_call",
                "time": t,
                "iteration": it,
                "model": "big",
                "duration": 2.0,
                "messages_sent": [{"role": "user", "content": f"[block 1 output]\nturn {it} " * 40}],
                "reply": f"```repl\nparts = chunks({it})\nres = llm_query_batched(parts)\n```",
                "input_tokens": 5000,
                "output_tokens": 200,
                "cost": 0.01,
            }
        )
        cell_start = t
        for b in range(batches):
            batch_id = f"b{it}-{b}"
            for k in range(per_batch):
                calls += 1
                start = t + 0.001 * k
                call = {
                    **base,
                    "call_id": f"c{calls}",
                    "batch_id": batch_id,
                    "call_kind": "llm_query",
                    "model": "small",
                }
                records.append(
                    {
                        **call,
                        "kind": "sub_call_start",
                        "time": start,
                        "batch_size": per_batch,
                        "prompt": f"Find needles in chunk {calls}: " + "lorem ipsum dolor sit amet " * 12,
                    }
                )
                records.append(
                    {
                        **call,
                        "kind": "sub_call_end",
                        "time": start + 0.5 + (k % 7) * 0.1,
                        "response": f"needle-{calls}: found {k % 5}",
                        "error": None,
                        "input_tokens": 900,
                        "output_tokens": 12,
                        "cost": 0.0001,
                        "duration": 0.5 + (k % 7) * 0.1,
                    }
                )
            t += 1.3
        if it == iterations // 2:
            nested = {"type": "event", "run_id": nested_id, "depth": 1, "parent_run_id": run_id}
            records.append(
                {
                    **nested,
                    "kind": "run_start",
                    "time": t,
                    "query": "nested",
                    "context_description": {},
                    "root_model": "small",
                    "sub_models": ["small"],
                }
            )
            records.append(
                {
                    **nested,
                    "kind": "root_call",
                    "time": t + 1,
                    "iteration": 1,
                    "model": "small",
                    "duration": 1.0,
                    "messages_sent": [],
                    "reply": "FINAL(3)",
                    "input_tokens": 100,
                    "output_tokens": 5,
                    "cost": 0.0,
                }
            )
            records.append(
                {
                    **nested,
                    "kind": "final",
                    "time": t + 1.1,
                    "response": "3",
                    "finish_reason": "final",
                    "iterations": 1,
                    "usage": {},
                    "duration": 1.1,
                }
            )
            t += 1.2
        records.append(
            {
                **base,
                "kind": "cell",
                "time": t,
                "iteration": it,
                "index": 1,
                "code": "res = ...",
                "output": f"{per_batch * batches} results",
                "error": None,
                "duration": t - cell_start,
            }
        )
    records.append(
        {
            **base,
            "kind": "final",
            "time": t + 1,
            "response": "12345",
            "finish_reason": "final",
            "iterations": iterations,
            "usage": {},
            "duration": t + 1 - now,
        }
    )
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return calls


def main() -> None:
    """Build the log and the page, open it in Chromium, and print the timings."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    # Batched is the usual shape; unbatched (every call its own bar) is the timeline's worst case.
    scenarios = {"batched 20 x 5 x 100": (20, 5, 100), "unbatched 20 x 500 x 1": (20, 500, 1)}
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=FLAGS)
        for name, shape in scenarios.items():
            log = Path(folder) / "big.jsonl"
            calls = synthetic_log(log, *shape)
            started = time.perf_counter()
            page_path = write_html(log, Path(folder) / "big.html")
            build = time.perf_counter() - started
            bars = bar_count(load(log))
            print(
                f"== {name}: {calls:,} sub-calls, log {log.stat().st_size / 1e6:.1f} MB, "
                f"page {page_path.stat().st_size / 1e6:.1f} MB, {bars:,} bars; "
                f"python builds the page in {build:.2f} s"
            )
            for attempt in range(1, args.repeat + 1):
                print(f"   run {attempt}: {_measure(browser, page_path)}")
        browser.close()


def _measure(browser: Any, page_path: Path) -> str:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    started = time.perf_counter()
    page.goto(page_path.as_uri(), wait_until="load")
    page.wait_for_selector("#tree details.run[open]")
    wall = time.perf_counter() - started
    rendered = page.evaluate("window.rlmViewer.rendered") / 1000
    drawn = page.locator("#timeline .bar").count()
    search = page.evaluate(
        "(() => { const t = performance.now(); window.rlmViewer.search('needle-9999');"
        " return performance.now() - t; })()"
    )
    reveal = page.evaluate(
        "(() => { const t = performance.now(); window.rlmViewer.reveal('call:9999'); return performance.now() - t; })()"
    )
    page.close()
    return (
        f"rendered {rendered:.2f} s after navigation start (open to drawn, wall {wall:.2f} s), "
        f"{drawn:,} bars; first search {search:.0f} ms; reveal the last sub-call {reveal:.0f} ms; "
        f"page errors: {errors or 'none'}"
    )


if __name__ == "__main__":
    main()
