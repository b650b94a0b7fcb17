"""Time to first token through `ChatRLM.astream`: ``python -m benchmarks.streaming_bench``.

An RLM knows its answer only when the root model calls FINAL, so the first answer token cannot come
before the run's last root call returns. This measures how close to that floor the stream gets: the
time to the first chunk, the time to the last, and the run's own duration, for a three-turn run at a
fixed model latency against the local fake server. Medians of `--reps` runs; prints one line each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from rlm_adapters.langchain import ChatRLM
from rlm_adapters.testing import FakeOpenAIServer

SCRIPT = [
    "```repl\nprint(len(context))\n```",
    "```repl\nnote = llm_query('summarise: ' + context[:2000])\nprint(note)\n```",
    "FINAL(" + "the answer, word by word. " * 20 + ")",
]


async def _one(llm: ChatRLM) -> dict[str, float]:
    started = time.perf_counter()
    first: float | None = None
    async for _chunk in llm.astream("the context line\n" * 500):
        if first is None:
            first = time.perf_counter() - started
    total = time.perf_counter() - started
    assert first is not None
    return {"first_chunk": first, "last_chunk": total}


def measure(latency: float, reps: int) -> dict[str, Any]:
    """Run the three-turn script `reps` times; the floor is its three root calls and one sub-call."""
    with FakeOpenAIServer(root=SCRIPT, latency=latency) as server:
        options = {"model_name": "root", "base_url": server.base_url, "api_key": "bench"}
        # The RLM route (a short input would take the direct route, ChatRLM's default): its first chunk is measured.
        llm = ChatRLM(direct_below_tokens=None, backend="openai", backend_kwargs=options)
        runs = [asyncio.run(_one(llm)) for _ in range(reps)]
    floor = 4 * latency  # three root calls and one llm_query, one after the other
    first = statistics.median(r["first_chunk"] for r in runs)
    last = statistics.median(r["last_chunk"] for r in runs)
    return {"latency": latency, "floor": floor, "first_chunk": first, "last_chunk": last, "first/floor": first / floor}


def main(argv: list[str] | None = None) -> int:
    """Print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per model request (default 0.2)")
    parser.add_argument("--reps", type=int, default=5, help="runs whose median is reported (default 5)")
    args = parser.parse_args(argv)
    row = measure(args.latency, args.reps)
    print(
        f"ChatRLM.astream, 3 root turns + 1 sub-call at {row['latency']:g} s: first chunk {row['first_chunk']:.3f} s, "
        f"last chunk {row['last_chunk']:.3f} s, floor (the model calls alone) {row['floor']:.3f} s, "
        f"first chunk / floor {row['first/floor']:.2f}x; load average {os.getloadavg()[0]:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
