"""What cited sources and claim checks cost, by input size and shape: time, where it goes, and memory.

``python -m benchmarks.citations_bench --shape oneline lines repetitive binary quoting [--mb 5 40 200]`` runs
the shapes of real inputs (`benchmarks.shapes`: Debian's changelogs and the standard library's source on one
line or many, a repetitive log, binary-ish text, an answer quoting 45 passages), each a run that sends 16
chunks of 200,000 characters to sub-models: per shape and size, seconds matching while the run works
(``during``), seconds after the answer (``after``), how many of the answer's verbatim quotes are supported,
the first sources and what is unsupported (only the made-up number should be).

Run as ``python -m benchmarks.citations_bench [--mb 16 64 200] [--scenario grep map] [--gb]`` for trees. The input is
a generated tree (`benchmarks.tree`: files of about 10 KB of code, log and prose lines, facts planted at
known lines; ``--tree hard``: 400 files of random 12-word lines from a 30,000-word vocabulary); the run is simulated
by the events the engine emits, in two shapes:

- ``grep``: the root's code greps the tree, prints the hits and asks a sub-model about each (what
  `rlm ask` over a tree usually does; the planted tests' root model);
- ``map``: every file is sent to a sub-model (the most text a run can show models: the whole input).

The answer names the planted codes, a number the run never read and one that appears nowhere. Reported per size:
seconds spent matching the texts that reached a model (``during``: a real run does it on a worker thread while it
waits for its models), seconds after the answer (``after``: sources and claims), their sum per MB, peak memory
growth against the input's size, and the functions the time went to. ``--gb`` adds a 1 GB input (about a minute to
generate). Numbers are printed, never asserted."""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks import shapes as shaped
from benchmarks.tree import Tree, make_tree
from rlm_adapters.core.events import CellExecuted, RunStarted, SubCallFinished, SubCallSent, SubCallStarted
from rlm_adapters.sources import SourceTracker, _anchors, _provenance, _tracker

# Where the time goes: these functions are timed (CPU seconds, their callees included) while a row runs.
PHASES = {
    (_anchors.AnchorIndex, "__init__"): "anchor index",
    (_anchors.AnchorIndex, "runs"): "anchor runs",
    (_provenance, "match"): "needles + claims in input",
    (_tracker, "search_read_seen"): "answer's words",
    (_tracker, "check"): "claims",
    (_tracker, "found_in_blocks"): "claims in output",
    (_provenance, "uses_of"): "ranges",
    (_tracker, "choose"): "citing",
    (_tracker.SourceTracker, "_windows"): "windows",
}


@contextlib.contextmanager
def timed_phases() -> Iterator[dict[str, float]]:
    """Time each of `PHASES` (CPU seconds) while the block runs."""
    seconds: dict[str, float] = {}
    originals = {key: getattr(key[0], key[1]) for key in PHASES}

    def wrap(label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[label] = seconds.get(label, 0.0) + time.process_time() - started

        return timed

    for (owner, name), label in PHASES.items():
        setattr(owner, name, wrap(label, originals[(owner, name)]))
    try:
        yield seconds
    finally:
        for (owner, name), function in originals.items():
            setattr(owner, name, function)


def _rss(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    return 0.0


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
        handle.write("5")  # resets VmHWM to the current RSS


def answer(tree: Tree) -> str:
    """The run's answer: the planted codes, a number only an unread file holds, and a made-up one."""
    codes = ", ".join(tree.codes())
    return f"The rollout passwords are {codes}. The vault number is 31-77-4096 and 8,312 rotations were logged."


def _sub_call(tracker: SourceTracker, number: int, prompt: str) -> None:
    ids = {"run_id": "r", "call_id": f"c{number}", "batch_id": "b", "call_kind": "llm_query", "model": "m"}
    tracker.on_event(SubCallStarted(**ids, batch_size=1, prompt=prompt))  # type: ignore[arg-type]
    tracker.on_event(SubCallSent(**ids))  # type: ignore[arg-type]
    tracker.on_event(  # type: ignore[call-arg]
        SubCallFinished(**ids, response="yes", error=None, input_tokens=1, output_tokens=1, cost=0.0, duration=0.0)
    )


def simulate(tracker: SourceTracker, tree: Tree, documents: list[dict[str, Any]], scenario: str) -> None:
    """Feed `tracker` the events of a run of `scenario` over `documents`."""
    preview = json.dumps(documents[0], ensure_ascii=False)[:400]
    tracker.on_event(
        RunStarted(
            run_id="r", query="q", context_description={"type": "list", "preview": preview}, root_model="m",
            sub_models=["m"], sandbox="local", isolation="none", max_iterations=30, max_depth=1,
        )
    )  # fmt: skip
    hits = [str(documents[index]["text"]).splitlines()[line - 1].strip() for index, (line, _) in tree.planted.items()]
    if scenario == "map":
        for number, document in enumerate(documents):
            _sub_call(
                tracker, number, f"Does this file hold a rollout password? Answer yes or no.\n\n{document['text']}"
            )
            if number % 64 == 0:
                tracker.provenance.wait()  # a run's worker thread keeps up: the prompts do not pile up
    shown = "\n".join(f"{documents[i]['id']}: {h}" for i, h in zip(tree.planted, hits, strict=True))
    tracker.on_event(CellExecuted(run_id="r", iteration=1, index=1, code="", output=shown, error=None, duration=0.0))
    for number, hit in enumerate(hits):
        _sub_call(tracker, len(documents) + number, f"Is this a password line? {hit}")


def measure(megabytes: float, scenario: str, kind: str = "friendly") -> dict[str, Any]:
    """One size and scenario: seconds during and after the run, memory, where the time went, the result."""
    tree = make_tree(kind, megabytes)
    documents = list(tree.documents())
    size = sum(len(str(d["text"])) for d in documents)
    gc.collect()
    before = _rss("VmRSS")
    _reset_peak()
    tracker = SourceTracker(documents)
    with timed_phases() as phases:
        started, cpu = time.perf_counter(), time.process_time()
        simulate(tracker, tree, documents, scenario)
        tracker.provenance.wait()  # what a run's worker thread does while the run works
        during, during_cpu = time.perf_counter() - started, time.process_time() - cpu
        found = tracker.findings(answer(tree))
    after, after_cpu = time.perf_counter() - started - during, time.process_time() - cpu - during_cpu
    peak = _rss("VmHWM") - before
    cited = {(s.path, s.line_start) for s in found.sources}
    flagged = sorted(c.text for c in found.claims if not c.supported)
    return {
        "mb": size / 1e6,
        "scenario": scenario,
        "during": during,
        "after": after,
        "during_cpu": during_cpu,
        "after_cpu": after_cpu,
        "per_mb_ms": 1000 * (during_cpu + after_cpu) / (size / 1e6),
        "peak_mb": peak,
        "peak_x": peak / (size / 1e6),
        "cited_ok": tree.expected() <= cited,
        "flagged": flagged,
        "phases": phases,
    }


def measure_shape(shape: shaped.Shape, megabytes: float) -> dict[str, Any]:
    """One shape and size: seconds during and after the run, the quotes supported, the sources, the rest."""
    text = shaped.make_input(shape, megabytes)
    run = shaped.simulate(shape, text)
    gc.collect()
    tracker = SourceTracker(text, text_name="input.txt")
    started = time.perf_counter()
    tracker.start()
    for event in run.events:
        tracker.on_event(event)
    tracker.provenance.wait()  # what a run's worker thread does while the run works
    during = time.perf_counter() - started
    found = tracker.findings(run.answer)
    after = time.perf_counter() - started - during
    quotes = [claim for claim in found.claims if claim.kind == "quote"]
    return {
        "mb": len(text) / 1e6,
        "during": during,
        "after": after,
        "quotes": f"{sum(claim.supported for claim in quotes)}/{len(quotes)}",
        "sources": [source.location for source in found.sources[:2]],
        "unsupported": sorted({claim.text[:24] for claim in found.claims if not claim.supported}),
    }


def shapes(shape_names: list[shaped.Shape], sizes: list[float]) -> None:
    """Print a Markdown table of `measure_shape` over `shape_names` and `sizes`."""
    print(f"sources of a run over each shape (the answer exists at 0; load {os.getloadavg()[0]:.1f})")
    print("| shape | input | during s | after s | quotes supported | first sources | unsupported |")
    print("|---|---|---|---|---|---|---|")
    for shape in shape_names:
        for size in sizes:
            row = measure_shape(shape, size)
            print(
                f"| {shape} | {row['mb']:.0f} MB | {row['during']:.2f} | {row['after']:.2f} | {row['quotes']} "
                f"| {', '.join(row['sources'])} | {', '.join(row['unsupported'])} |",
                flush=True,
            )
            gc.collect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, nargs="+", default=None, help="sizes (default: 16 64 200; shapes 5 40 200)")
    parser.add_argument("--scenario", nargs="+", choices=["grep", "map"], default=["grep", "map"])
    parser.add_argument("--gb", action="store_true", help="also a 1 GB input")
    parser.add_argument("--tree", choices=["friendly", "hard"], nargs="+", default=["friendly", "hard"])
    parser.add_argument("--shape", nargs="+", choices=shaped.SHAPES, help="real inputs' shapes instead of trees")
    args = parser.parse_args()
    if args.shape:
        shapes(args.shape, sorted(args.mb or [5.0, 40.0, 200.0]))
        return
    sizes = sorted(args.mb or [16.0, 64.0, 200.0]) + ([1000.0] if args.gb else [])
    print("seconds of wall clock (and of CPU, which a busy machine does not inflate); ms/MB counts CPU")
    print(f"{'input':>8} {'run':>5} {'during s':>12} {'after s':>12} {'ms/MB':>6} {'peak MB':>8} {'x input':>8}  cited")
    for kind, size in ((k, s) for k in args.tree for s in sizes):
        for scenario in args.scenario:
            row = measure(size, scenario, kind)
            print(
                f"{kind:>8} {row['mb']:>6.0f}MB {scenario:>5} {row['during']:>5.2f} ({row['during_cpu']:>4.2f})"
                f" {row['after']:>5.2f} ({row['after_cpu']:>4.2f}) {row['per_mb_ms']:>6.1f}"
                f" {row['peak_mb']:>8.0f} {row['peak_x']:>8.2f}  {row['cited_ok']}  unsupported: {row['flagged']}"
            )
            print("         " + ", ".join(f"{k} {v:.2f}s" for k, v in sorted(row["phases"].items())))
            gc.collect()


if __name__ == "__main__":
    main()
