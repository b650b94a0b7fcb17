"""The call cache's price and payoff: ``python -m benchmarks.cache_bench [--quick] [--json]``.

- *Cost*: the fan-out scenario of `benchmarks.scenarios` (one root turn, ``llm_query_batched`` of N prompts at
  the scenario's latency), run without a cache and with a fresh cache file (every call a miss, every reply
  committed before it is used), alternating, the same number of times; the medians and their difference.
- *Payoff*: a three-turn run (two batches of sub-calls) fresh, resumed after its first turn (the rest live),
  and replayed whole from its cache (no request at all), each checked on the server's counters.

Both use our engine's defaults (the subprocess sandbox, adaptive concurrency) against the shared fake server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import scenarios
from benchmarks.run import PARENT_CONTEXT
from benchmarks.server import BenchServer, Script, final
from rlm_adapters import RLM, Event, SubCallFinished

QUESTION = f"{scenarios.PARENT_MARKER}: answer the question."


def make(url: str, cache: Path | None, max_iterations: int = 10) -> RLM:
    """Our engine on the fake server, with `cache` (None: no cache)."""
    return RLM(
        backend="openai",
        backend_kwargs=scenarios.client_kwargs(url, "root-model"),
        other_backends=["openai"],
        other_backend_kwargs=[scenarios.client_kwargs(url, "leaf-model")],
        max_iterations=max_iterations,
        cache=cache,
    )


def _timed(rlm: RLM) -> float:
    started = time.perf_counter()
    result = rlm.completion(PARENT_CONTEXT, QUESTION)
    elapsed = time.perf_counter() - started
    if result.finish_reason != "final":
        raise RuntimeError(f"the run ended with {result.finish_reason!r}: {result.error}")
    return elapsed


def cost_of_the_cache(server: BenchServer, n: int, latency: float, reps: int, folder: Path) -> dict[str, Any]:
    """Fan-out of `n` prompts with and without a (fresh, so all-miss) cache, alternating `reps` times."""
    scenario = scenarios.fan_out(n, latency, reps)
    times: dict[str, list[float]] = {"no cache": [], "cache": []}
    for rep in range(reps):
        for arm in times:
            server.use(scenario.script, scenario.latency, scenario.server_width)
            cache = folder / f"fan-out-{n}-{rep}.sqlite" if arm == "cache" else None
            times[arm].append(_timed(make(server.base_url, cache)))
            counts = server.counts()
            if (counts["root_requests"], counts["leaf_requests"]) != (1, n):
                raise RuntimeError(f"fan-out {n} ({arm}) made {counts}, not 1 root and {n} leaf requests")
    plain, cached = statistics.median(times["no cache"]), statistics.median(times["cache"])
    return {
        "scenario": scenario.name,
        "latency": latency,
        "reps": reps,
        "no_cache_median": round(plain, 4),
        "cache_median": round(cached, 4),
        "difference": round(cached - plain, 4),
        "no_cache_runs": [round(t, 4) for t in times["no cache"]],
        "cache_runs": [round(t, 4) for t in times["cache"]],
    }


def three_turns(n: int) -> Script:
    """Two batches of `n` sub-calls, then the answer."""
    batch = "parts = llm_query_batched([f'item {{i}}: the magic number is {{{base} + i}}' for i in range({n})])"
    return Script(
        (
            lambda side: batch.format(base=1000, n=n).replace("parts", "a"),
            lambda side: batch.format(base=2000, n=n).replace("parts", "b"),
            lambda side: final(side, "str(len(a) + len(b))"),
        )
    )


def _first_turn_only(url: str, cache: Path, n: int) -> None:
    """Leave in `cache` what a run killed during its second turn leaves: its first turn and first batch."""
    stop = asyncio.Event()
    done = [0]

    def count(event: Event) -> None:
        done[0] += isinstance(event, SubCallFinished)
        if done[0] == n:
            stop.set()  # the first batch is back (and kept): stop before the second root call

    result = make(url, cache).completion(PARENT_CONTEXT, QUESTION, callbacks=[count], cancel_event=stop)
    if result.finish_reason != "cancelled":
        raise RuntimeError(f"the priming run ended with {result.finish_reason!r}, not cancelled")


def payoff_of_a_resume(server: BenchServer, n: int, latency: float, reps: int, folder: Path) -> dict[str, Any]:
    """A three-turn run fresh, resumed after its first turn, and replayed whole, `reps` times each."""
    script = three_turns(n)
    times: dict[str, list[float]] = {"fresh": [], "resumed after turn 1": [], "replayed whole": []}
    expected = {"fresh": 3 + 2 * n, "resumed after turn 1": 2 + n, "replayed whole": 0}
    for rep in range(reps):
        cache = folder / f"resume-{n}-{rep}.sqlite"
        server.use(script, latency)
        times["fresh"].append(_timed(make(server.base_url, None)))
        server.use(script, latency)
        _first_turn_only(server.base_url, cache, n)
        for arm in ("resumed after turn 1", "replayed whole"):
            server.use(script, latency)
            times[arm].append(_timed(make(server.base_url, cache)))
            requests = server.counts()["requests"]
            if requests != expected[arm]:
                raise RuntimeError(f"{arm} made {requests} requests, not {expected[arm]}")
    medians = {arm: statistics.median(ts) for arm, ts in times.items()}
    return {
        "scenario": f"three turns, two batches of {n}",
        "latency": latency,
        "reps": reps,
        **{f"{arm}_median": round(t, 4) for arm, t in medians.items()},
        "requests": expected,
    }


def main(argv: list[str] | None = None) -> int:
    """Run both measurements and print the table (or the JSON rows)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized: fan-out 64 at 0.02 s, 2 reps")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    fan_outs = [(64, 0.02, 2)] if args.quick else [(64, 0.5, 5), (1000, 0.2, 3)]
    resume = (8, 0.02, 1) if args.quick else (32, 0.3, 3)
    with tempfile.TemporaryDirectory(prefix="rlm-cache-bench-") as folder, BenchServer() as server:
        _timed(make(server.base_url, None))  # first-use imports before any clock
        rows = [cost_of_the_cache(server, n, latency, reps, Path(folder)) for n, latency, reps in fan_outs]
        payoff = payoff_of_a_resume(server, *resume, Path(folder))
    if args.json:
        print(json.dumps({"cost": rows, "payoff": payoff}))
        return 0
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'scenario':<26} {'no cache':>9} {'cache':>9} {'diff':>8}   runs (no cache | cache)")
    for r in rows:
        runs = f"{' '.join(f'{t:.3f}' for t in r['no_cache_runs'])} | {' '.join(f'{t:.3f}' for t in r['cache_runs'])}"
        print(f"{r['scenario'] + ' @' + str(r['latency']) + 's':<26} {r['no_cache_median']:>8.3f}s "
              f"{r['cache_median']:>8.3f}s {r['difference']:>+7.3f}s   {runs}")  # fmt: skip
    print(f"\n{payoff['scenario']} at {payoff['latency']} s a request (requests: {payoff['requests']})")
    for arm in ("fresh", "resumed after turn 1", "replayed whole"):
        print(f"  {arm:<22} {payoff[f'{arm}_median']:>8.3f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
