"""Run the benchmarks: ``python -m benchmarks.run [--quick] [--out DIR] [--no-reference] [--no-peers]``.

Both engines, the peers where a scenario has them (minrlm, rlmflow: `benchmarks.peers`) and, for fan-out,
the floor run every scenario alternately in this one process, against
one fake OpenAI-compatible server; each run's root and leaf request counts are checked on the server.
Context sizes run in a fresh subprocess per size and engine. Prints a table, writes ``results.json`` and
``growth.png`` into ``--out``. Exit status 1 when a run failed or made the wrong number of calls.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import peers, reference, report, scenarios, sizing
from benchmarks.scenarios import Scenario
from benchmarks.server import BenchServer
from rlm_adapters.core.lm.limiter import DEFAULT_CEILING, DEFAULT_START

ROOT = Path(__file__).resolve().parents[1]
PARENT_CONTEXT = "A small parent context for the timing scenarios. " * 8
SIZE_TIMEOUT = 900.0


def _check(server: BenchServer, root: int, leaf: int) -> tuple[dict[str, int], str | None]:
    counts = server.counts()
    if counts["root_requests"] != root or counts["leaf_requests"] != leaf:
        return counts, (
            f"expected {root} root + {leaf} leaf requests, the server saw "
            f"{counts['root_requests']} root + {counts['leaf_requests']} leaf"
        )
    return counts, None


def _arm(server: BenchServer, scenario: Scenario, run: Callable[[], float], root: int, leaf: int) -> dict[str, Any]:
    server.use(scenario.script, scenario.latency, scenario.server_width)
    try:
        seconds: float | None = run()
        counts, error = _check(server, root, leaf)
    except Exception as exc:  # a failed run is reported, not fatal to the other scenarios
        seconds, counts, error = None, server.counts(), f"{type(exc).__name__}: {exc}"
    return {"seconds": seconds, "counts": counts, "error": error}


def run_timing(
    server: BenchServer, scenario: Scenario, with_reference: bool, with_peers: tuple[peers.Peer, ...] = ()
) -> dict[str, Any]:
    """Alternate ours / reference / the peers / floor `scenario.reps` times in this process."""
    url = server.base_url
    ours = scenarios.make_ours(url, scenario)
    ref = reference.make_reference(url, scenario) if with_reference and scenario.reference else None
    peer_engines = [(peer, peer.make(url, scenario)) for peer in with_peers] if scenario.peers else []
    arms: dict[str, list[dict[str, Any]]] = {"ours": []}
    for _ in range(scenario.reps):
        root, leaf = scenario.root_calls, scenario.leaf_calls
        arms["ours"].append(_arm(server, scenario, lambda: scenarios.run_ours(ours, PARENT_CONTEXT), root, leaf))
        if ref is not None:
            run_ref = lambda: reference.run_reference(ref, PARENT_CONTEXT)  # noqa: E731
            arms.setdefault("reference", []).append(_arm(server, scenario, run_ref, root, leaf))
        for peer, make in peer_engines:
            run_peer = functools.partial(peers.run_peer, peer, make, PARENT_CONTEXT)
            arms.setdefault(peer.name, []).append(_arm(server, scenario, run_peer, root, leaf))
        if scenario.floor_prompts:
            prompts = scenario.floor_prompts
            run_floor = functools.partial(scenarios.run_floor, url, prompts, scenario.server_width)
            arms.setdefault("floor", []).append(_arm(server, scenario, run_floor, 1, prompts))
            if scenario.peers:  # the peers' client: the sync SDK from threads
                run_threads = functools.partial(scenarios.run_floor_threads, url, prompts)
                arms.setdefault("floor-threads", []).append(_arm(server, scenario, run_threads, 1, prompts))
    return {
        "name": scenario.name,
        "title": scenario.title,
        "kind": scenario.kind,
        "per": scenario.per,
        "peers": scenario.peers,
        "expected": {"root": scenario.root_calls, "leaf": scenario.leaf_calls},
        "arms": {name: _summarise(runs) for name, runs in arms.items()},
    }


def _summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["seconds"] for r in runs if r["seconds"] is not None and r["error"] is None]
    return {
        "median": statistics.median(times) if times else None,
        "min": min(times) if times else None,
        "runs": runs,
        "errors": [r["error"] for r in runs if r["error"]],
    }


def _measure_size(server: BenchServer, scenario: Scenario, side: str, mb: float) -> dict[str, Any]:
    server.use(scenario.script, scenario.latency)
    command = [
        sys.executable,
        "-m",
        "benchmarks.sizing",
        "--side",
        side,
        "--mb",
        str(mb),
        "--url",
        server.base_url,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=SIZE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return {"side": side, "mb": mb, "error": f"timed out after {SIZE_TIMEOUT:g} s"}
    if done.returncode != 0:
        return {"side": side, "mb": mb, "error": done.stderr.strip()[-800:] or f"exit {done.returncode}"}
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    runs = sizing.RUNS_PER_PROCESS
    counts, error = _check(server, runs * scenario.root_calls, runs * scenario.leaf_calls)
    return {**measured, "mb": mb, "counts": counts, "error": error}


def run_sizes(server: BenchServer, scenario: Scenario, with_reference: bool) -> dict[str, Any]:
    """One fresh process per size and engine, ours and the reference alternating."""
    points: list[dict[str, Any]] = []
    for mb in scenario.sizes_mb:
        points.append(_measure_size(server, scenario, "ours", mb))
        if with_reference and scenario.reference:
            points.append(_measure_size(server, scenario, "reference", mb))
    return {
        "name": scenario.name,
        "title": scenario.title,
        "kind": scenario.kind,
        "expected": {"root": scenario.root_calls, "leaf": scenario.leaf_calls},
        "points": points,
    }


def warm_up(server: BenchServer, with_reference: bool, with_peers: tuple[peers.Peer, ...] = ()) -> None:
    """Pay first-use imports (the SDK loads its resources lazily) before any clock starts."""
    scenario = scenarios.overhead_run(1)
    server.use(scenario.script, 0.0)
    scenarios.run_ours(scenarios.make_ours(server.base_url, scenario), PARENT_CONTEXT)
    scenarios.run_floor(server.base_url, 2)
    if with_reference:
        reference.run_reference(reference.make_reference(server.base_url, scenario), PARENT_CONTEXT)
    for peer in with_peers:
        server.use(scenario.script, 0.0)
        peers.run_peer(peer, peer.make(server.base_url, scenario), PARENT_CONTEXT)


def main(argv: list[str] | None = None) -> int:
    """Run every scenario, print the table, write the JSON file and the growth plot."""
    parser = argparse.ArgumentParser(description="Benchmarks against the reference RLM (rlms 0.1.3).")
    parser.add_argument("--quick", action="store_true", help="CI-sized scenarios (under a minute)")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="folder for results.json, growth.png")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference arm")
    parser.add_argument("--no-peers", action="store_true", help="skip the peer arms (minrlm, rlmflow)")
    parser.add_argument("--only", action="append", default=[], help="run the scenarios whose name starts so")
    args = parser.parse_args(argv)
    skipped = "--no-reference was given" if args.no_reference else reference.available()
    with_reference = skipped is None
    if skipped:
        print(f"reference arm skipped: {skipped}", file=sys.stderr)
    peers_skipped = {p.name: "--no-peers was given" if args.no_peers else p.available() for p in peers.PEERS}
    with_peers = tuple(p for p in peers.PEERS if peers_skipped[p.name] is None)
    for name, why in peers_skipped.items():
        if why:
            print(f"{name} arm skipped: {why}", file=sys.stderr)
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    with BenchServer() as server:
        warm_up(server, with_reference, with_peers)
        print(f"... warm-up {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        chosen = [s for s in scenarios.build(args.quick) if not args.only or s.name.startswith(tuple(args.only))]
        for scenario in chosen:
            print(f"... {scenario.name}: {scenario.title}", file=sys.stderr, flush=True)
            clock = time.perf_counter()
            if scenario.kind == "timing":
                results.append(run_timing(server, scenario, with_reference, with_peers))
            else:
                results.append(run_sizes(server, scenario, with_reference))
            results[-1]["elapsed"] = round(time.perf_counter() - clock, 2)
            print(f"    {results[-1]['elapsed']:.1f} s", file=sys.stderr, flush=True)
    meta = {
        "quick": args.quick,
        "reference": None if skipped else f"rlms {reference.REFERENCE_VERSION}",
        "reference_skipped": skipped,
        "peers": {p.name: p.version for p in with_peers},
        "peers_skipped": {name: why for name, why in peers_skipped.items() if why},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "seconds": round(time.perf_counter() - started, 1),
        "concurrency": {"start": DEFAULT_START, "ceiling": DEFAULT_CEILING, "adaptive": True},
    }
    summary = report.write(results, meta, args.out)
    print(summary.table)
    print(f"\nwrote {summary.json_path}" + (f" and {summary.plot_path}" if summary.plot_path else ""))
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
