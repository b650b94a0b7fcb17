"""What computing cited sources costs after a run, by input size (printed, not asserted).

Run as ``python -m benchmarks.citations_bench [--mb 4 16 32]``. The input is synthetic source-like text
(lines of words from a 50,000-word vocabulary, in 1,000 documents); the run is simulated by the events a
map-style run emits: one sub-call prompt per document, plus one printed line that the answer cites. Reported
per size: seconds and peak memory growth of `SourceTracker.sources` (index, matching and citing), which is
what `rlm_query`, `ChatRLM`, `RLMTool` and `rlm ask` add to a run. `MAX_INDEXED_CHARS` is set from these.
"""

from __future__ import annotations

import argparse
import random
import resource
import time

from rlm_adapters.core.events import CellExecuted, SubCallStarted
from rlm_adapters.sources import SourceTracker


def corpus(megabytes: float, documents: int = 1000, seed: int = 1) -> list[dict[str, object]]:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(50_000)]
    per_doc = int(megabytes * 1e6 / documents)
    docs = []
    for i in range(documents):
        lines, size = [], 0
        while size < per_doc:
            line = " ".join(rng.choice(vocabulary) for _ in range(12))
            lines.append(line)
            size += len(line) + 1
        docs.append({"id": f"src/f{i:04d}.txt", "text": "\n".join(lines) + "\n"})
    return docs


def measure(megabytes: float) -> tuple[float, float, int]:
    docs = corpus(megabytes)
    tracker = SourceTracker(docs)
    for i, doc in enumerate(docs):
        tracker.on_event(
            SubCallStarted(
                run_id="r", call_id=str(i), batch_id="b", batch_size=len(docs), call_kind="llm_query",
                model="m", prompt=f"Summarise: {doc['text']}",
            )
        )  # fmt: skip
    cited_line = str(docs[500]["text"]).splitlines()[3]
    tracker.on_event(
        CellExecuted(run_id="r", iteration=1, index=0, code="", output=cited_line, error=None, duration=0.0)
    )
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    sources = tracker.sources(f"It is {cited_line.split()[5]} {cited_line.split()[6]}")
    elapsed = time.perf_counter() - started
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    return elapsed, grown, len(sources)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, nargs="+", default=[4, 16, 32])
    args = parser.parse_args()
    print(f"{'input':>8} {'seconds':>8} {'peak MB +':>10} sources")
    for size in sorted(args.mb):
        elapsed, grown, count = measure(size)
        print(f"{size:>6.0f}MB {elapsed:>8.2f} {grown:>10.0f} {count}")


if __name__ == "__main__":
    main()
