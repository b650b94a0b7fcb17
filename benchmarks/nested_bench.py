"""Processes and memory of concurrent nested runs: ``python -m benchmarks.nested_bench``.

Runs the ``nested`` scenario of `benchmarks.scenarios` (N ``rlm_query`` children in one batch, two root turns
each at 0.1 s) with our defaults, for 16 and 64 children, and samples every process below this one while it
runs: how many are alive, and their summed resident (RSS) and proportional (PSS, shared pages split between
the processes that map them) memory. Idle spare workers are below this process too and are counted. The
first run of each size warms the spare pool up to that size; the reported run is the next one. The run
tree's ``max_sandboxes`` (default 32) caps the sandboxes alive at once, so 64 children run in two waves
(``--max-sandboxes 64`` lifts it). Prints a table; ``--json`` prints the rows as JSON instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks import scenarios
from benchmarks.run import PARENT_CONTEXT
from benchmarks.server import BenchServer
from benchmarks.sizing import field_kib, live_descendants

MIB = 2**20


@dataclasses.dataclass
class Peaks:
    """The largest values seen by `Sampler`."""

    processes: int = 0
    rss_mib: float = 0.0
    pss_mib: float = 0.0


class Sampler(threading.Thread):
    """Samples the processes below this one every `interval` seconds until stopped."""

    def __init__(self, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peaks = Peaks()
        self._stop_event = threading.Event()

    def sample(self) -> None:
        """One look at the processes below this one."""
        pids = live_descendants(os.getpid())
        rss = sum(field_kib(Path(f"/proc/{pid}/status"), "VmRSS:") for pid in pids) / 1024
        pss = sum(field_kib(Path(f"/proc/{pid}/smaps_rollup"), "Pss:") for pid in pids) / 1024
        self.peaks.processes = max(self.peaks.processes, len(pids))
        self.peaks.rss_mib = max(self.peaks.rss_mib, rss)
        self.peaks.pss_mib = max(self.peaks.pss_mib, pss)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> Peaks:
        """Stop sampling; returns the peaks."""
        self._stop_event.set()
        self.join()
        return self.peaks


def measure(children: int, max_sandboxes: int | None, latency: float = 0.1, settle: float = 2.0) -> dict[str, Any]:
    """One warm-up run and one measured run of `children` concurrent nested runs.

    Args:
        children: Nested runs in the batch.
        max_sandboxes: The run tree's cap (None: our default).
        latency: Seconds every model request waits.
        settle: Seconds between the two runs (the spare pool refills meanwhile).
    """
    scenario = scenarios.nested(children, latency, 1)
    with BenchServer() as server:
        rlm = scenarios.make_ours(server.base_url, scenario)
        if max_sandboxes is not None:
            rlm.max_sandboxes = max_sandboxes
        server.use(scenario.script, scenario.latency)
        scenarios.run_ours(rlm, PARENT_CONTEXT)  # warms the spare pool to this size
        time.sleep(settle)  # let the refills finish, as between two bursts
        idle = Sampler()
        idle.sample()
        server.use(scenario.script, scenario.latency)
        sampler = Sampler()
        sampler.start()
        seconds = scenarios.run_ours(rlm, PARENT_CONTEXT)
        peaks = sampler.stop()
        counts = server.counts()
    if counts["root_requests"] != scenario.root_calls:
        raise RuntimeError(f"expected {scenario.root_calls} root requests, the server saw {counts}")
    return {
        "children": children,
        "max_sandboxes": max_sandboxes or rlm.max_sandboxes,
        "seconds": round(seconds, 3),
        "processes_before": idle.peaks.processes,
        "peak_processes": peaks.processes,
        "peak_rss_mib": round(peaks.rss_mib, 1),
        "peak_pss_mib": round(peaks.pss_mib, 1),
        "pss_per_sandbox_mib": round(peaks.pss_mib / max(1, min(children + 1, max_sandboxes or 32)), 1),
    }


def main() -> None:
    """Measure 16 and 64 children and print the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--children", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--max-sandboxes", type=int, default=None, help="the run tree's cap (default: ours, 32)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = [measure(n, args.max_sandboxes) for n in args.children]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'children':>8} {'cap':>4} {'wall':>8} {'procs idle':>10} {'procs peak':>10} {'RSS peak':>10} "
          f"{'PSS peak':>10} {'PSS/sandbox':>11}")  # fmt: skip
    for r in rows:
        print(f"{r['children']:>8} {r['max_sandboxes']:>4} {r['seconds']:>7.2f}s {r['processes_before']:>10} "
              f"{r['peak_processes']:>10} {r['peak_rss_mib']:>8.0f}MB {r['peak_pss_mib']:>8.0f}MB "
              f"{r['pss_per_sandbox_mib']:>9.1f}MB")  # fmt: skip


if __name__ == "__main__":
    main()
