"""One context-size measurement in a fresh process: wall time, host peak memory, log size.

Run by `benchmarks.run` as ``python -m benchmarks.sizing --side ours --mb 10 --url URL``; prints one JSON
line. A fresh process per size keeps one size's peak memory (a high-water mark) from hiding the next
one's. Peaks are read from ``VmHWM`` in ``/proc``, which starts afresh at ``exec``; ``ru_maxrss`` does not
(Linux carries it across ``execve``, so a child would report its parent's size). The sandbox worker's peak
is sampled from its own ``/proc`` entry while it lives. The fake server runs in the parent, uncounted.
Each process makes one small warm-up run first (``RUNS_PER_PROCESS`` counts it), so that the baseline
already holds what the first request imports lazily.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from benchmarks import scenarios

MIB = 2**20
RUNS_PER_PROCESS = 2  # the warm-up run, then the measured one


def field_kib(path: Path, name: str) -> int:
    """A ``Name:  123 kB`` field of a /proc status-like file, in KiB (0 when the process is gone)."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith(name):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def peak_mib(pid: int | str = "self") -> float:
    """A process's peak resident memory since its ``exec`` (``VmHWM``), or 0 when it is gone."""
    return field_kib(Path(f"/proc/{pid}/status"), "VmHWM:") / 1024


def live_descendants(root: int) -> list[int]:
    """Every live (non-zombie) process below `root`."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found, frontier = [], [root]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found += children
        frontier += children
    return found


class ChildPeaks(threading.Thread):
    """Samples the peak memory of this process's descendants (the sandbox worker) until stopped."""

    def __init__(self, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = 0.0
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            for pid in live_descendants(os.getpid()):
                self.peak = max(self.peak, peak_mib(pid))

    def stop(self) -> float:
        """Stop sampling; returns the largest peak seen (MiB)."""
        self._stop_event.set()
        self.join()
        return self.peak


def measure(side: str, mb: float, url: str) -> dict[str, Any]:
    """Build the context, run the three-turn scenario once, and report what it cost."""
    scenario = scenarios.context_sizes((mb,))
    with tempfile.TemporaryDirectory(prefix="rlm-bench-log-") as log_dir:
        if side == "ours":
            make: Any = scenarios.make_ours
            run = scenarios.run_ours
        else:
            from benchmarks import reference

            make, run = reference.make_reference, reference.run_reference
        # Warm-up without a log: the SDK's lazy imports are not the context's cost.
        run(make(url, scenario), scenarios.make_context(0.01))
        rlm = make(url, scenario, log_dir)
        baseline = peak_mib()
        context = scenarios.make_context(mb)
        context_mib = len(context) / MIB
        sampler = ChildPeaks()
        sampler.start()
        seconds = run(rlm, context)
        children_peak = sampler.stop()
        peak = peak_mib()
        log_bytes = sum(p.stat().st_size for p in Path(log_dir).rglob("*") if p.is_file())
    return {
        "side": side,
        "context_mib": round(context_mib, 3),
        "seconds": seconds,
        "host_peak_rss_mib": round(peak, 1),
        "host_baseline_rss_mib": round(baseline, 1),
        "host_over_baseline_per_context": round((peak - baseline) / context_mib, 3),
        "children_peak_rss_mib": round(children_peak, 1),
        "log_bytes": log_bytes,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of the measuring subprocess."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--side", choices=["ours", "reference"], required=True)
    parser.add_argument("--mb", type=float, required=True)
    parser.add_argument("--url", required=True)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.side, args.mb, args.url)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
