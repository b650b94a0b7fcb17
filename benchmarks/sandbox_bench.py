"""Sandbox speed and memory: ``python -m benchmarks.sandbox_bench``.

Measures the trivial-cell round trip (``local`` and ``subprocess``), the subprocess worker's start
time (taking a warm spare, as runs do), the cold start of a worker with no spare under each bubblewrap
this machine has (the bundled one included) with the worker's Landlock and seccomp walls, and the
context hand-over for 1, 10 and 100 MB contexts (write the file, start the worker, load it): time, and
the peak memory of the host and of the worker. Each hand-over runs in a fresh process so that the
host's peak belongs to that size alone. Prints a table. Targets from issues 3 and 12: round trip under
2 ms median, start under 150 ms (cold, bundled bubblewrap + Landlock, too), 100 MB hand-over under
1.5 s with host peak under 1.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import Sandbox, SandboxSetup
from rlm_adapters.core.sandbox.local import LocalSandbox
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox, isolation

MB = 1024 * 1024


async def _no_calls(kind: str, args: dict[str, Any]) -> None:
    return None


def _setup(folder: Path, context: str) -> SandboxSetup:
    return SandboxSetup(validate_context(context), _no_calls, scratch=folder)


async def round_trip(kind: str, cells: int) -> float:
    """Median milliseconds of a trivial cell."""
    sandbox: Sandbox = LocalSandbox() if kind == "local" else SubprocessSandbox()
    with tempfile.TemporaryDirectory() as folder:
        await sandbox.start(_setup(Path(folder), "x"))
        try:
            times = []
            for _ in range(cells):
                started = time.perf_counter()
                await sandbox.execute("x = 1", None)
                times.append(time.perf_counter() - started)
        finally:
            await sandbox.aclose()
    return statistics.median(times) * 1000


async def start_time(runs: int) -> tuple[float, str]:
    """Median milliseconds from start() to a ready worker, and the isolation level."""
    times = []
    level = ""
    with tempfile.TemporaryDirectory() as folder:
        setup = _setup(Path(folder), "x")
        SubprocessSandbox().isolation  # noqa: B018 - probe the level once, outside the timing
        for _ in range(runs):
            sandbox = SubprocessSandbox()
            started = time.perf_counter()
            await sandbox.start(setup)
            times.append(time.perf_counter() - started)
            level = sandbox.level
            await sandbox.aclose()
    return statistics.median(times) * 1000, level


async def cold_start(reach: isolation.Reach, runs: int) -> tuple[float, float]:
    """Median and best milliseconds from start() to a ready worker started on demand (no spare) at `reach`."""
    times = []
    with tempfile.TemporaryDirectory() as folder:
        setup = _setup(Path(folder), "x")
        for _ in range(runs):
            sandbox = SubprocessSandbox(warm_spare=False)
            sandbox._reach = reach  # this very launcher (auto takes the system's bubblewrap first)
            started = time.perf_counter()
            await sandbox.start(setup)
            times.append(time.perf_counter() - started)
            await sandbox.aclose()
    return statistics.median(times) * 1000, min(times) * 1000


async def handover(megabytes: int) -> dict[str, float]:
    """One hand-over in this process: seconds, host and worker peak memory in MB."""
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    context = "abcdefghij" * (megabytes * MB // 10)
    SubprocessSandbox().isolation  # noqa: B018 - probe outside the timing
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        sandbox = SubprocessSandbox()
        await sandbox.start(_setup(Path(folder), context))
        elapsed = time.perf_counter() - started
        probe = "import resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
        worker_kb = int((await sandbox.execute(probe, None)).output)
        await sandbox.aclose()
    host_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": elapsed, "host_peak_mb": host_peak, "host_extra_mb": host_peak - baseline,
            "worker_peak_mb": worker_kb / 1024}  # fmt: skip


def main() -> None:
    """Run every measurement and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handover", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cells", type=int, default=300)
    args = parser.parse_args()
    if args.handover:
        print(json.dumps(asyncio.run(handover(args.handover))))
        return
    rows: list[tuple[str, str, str]] = []
    for kind in ("local", "subprocess"):
        rows.append((f"trivial cell round trip ({kind})", f"{asyncio.run(round_trip(kind, args.cells)):.3f} ms",
                     "median" + (", target < 2 ms" if kind == "subprocess" else "")))  # fmt: skip
    start_ms, level = asyncio.run(start_time(10))
    rows.append((f"worker start, warm spare ({level})", f"{start_ms:.0f} ms", "median of 10, target < 150 ms"))
    for reach in isolation.reaches(sys.executable):
        if reach.level == "bwrap":
            median, best = asyncio.run(cold_start(reach, 20))
            rows.append((f"worker cold start ({reach.name})", f"{median:.0f} ms",
                         f"median of 20 (best {best:.0f} ms), no spare, target < 150 ms"))  # fmt: skip
    for megabytes in (1, 10, 100):
        out = subprocess.run([sys.executable, "-m", "benchmarks.sandbox_bench", "--handover", str(megabytes)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        m = json.loads(out.stdout)
        rows.append((f"context hand-over {megabytes} MB", f"{m['seconds']:.3f} s",
                     f"host peak {m['host_peak_mb']:.0f} MB (+{m['host_extra_mb']:.0f} MB = "
                     f"{m['host_extra_mb'] / megabytes:.2f}x context), "
                     f"worker peak {m['worker_peak_mb']:.0f} MB"))  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>10}  notes")
    print(f"{'-' * width}  {'-' * 10}  {'-' * 5}")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>10}  {note}")


if __name__ == "__main__":
    main()
