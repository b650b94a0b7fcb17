"""How many cloud sandboxes one host process drives, and the host's memory per sandbox.

``python -m benchmarks.remote_sandbox_bench [--sizes 10,100,500,1000] [--latency 0.05] [--cells 5]``

For each provider (``modal``, ``prime``, ``daytona``) and each N, N sandboxes are started at once in one
event loop, each runs `cells` cells (every cell makes one ``llm_query`` that the host answers), and all are
closed. The providers are the SDK fakes of ``tests/core/sandbox/cloud/fakes.py`` (the real sandbox classes,
the real host channel, Prime's real ``AsyncSandboxProcess``), with a simulated remote worker: every SDK
call and every frame the worker sends waits `latency` seconds, the round trip to a provider's region.
The worker itself runs on the provider's machine, so only the host's side is measured:

- wall time of the whole batch and cells per second;
- host memory per open sandbox: resident set size with all N open minus before, over N, and the Python
  heap (tracemalloc, in a second pass) over N;
- event-loop lag: the worst delay of a 10 ms ticker while the batch runs (how responsive the host stays).

The host "drives" N sandboxes while the batch time stays near the time of one sandbox (latency-bound)
and the loop lag stays small; past that it becomes CPU-bound. Prints a table; ``--json`` writes the rows.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.cloud.daytona import DaytonaSandbox
from rlm_adapters.core.sandbox.cloud.modal import ModalSandbox
from rlm_adapters.core.sandbox.cloud.prime import PrimeSandbox
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from tests.core.sandbox.cloud.fakes import FakeAsyncDaytona, FakeModal, FakePrimeClient, Service, simulated_launcher

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """The host process's resident set size now, in bytes."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * PAGE


async def _answer(kind: str, args: dict[str, Any]) -> str:
    return "ok"


def _factory(kind: str, service: Service) -> Callable[[], RemoteSandbox]:
    if kind == "modal":
        modal = FakeModal(service)
        return lambda: ModalSandbox(sdk=modal, token_id="ak-bench", token_secret="as-bench")
    if kind == "prime":
        prime = FakePrimeClient(service)
        return lambda: PrimeSandbox(client=prime)
    daytona = FakeAsyncDaytona(service)
    return lambda: DaytonaSandbox(client=daytona)


async def _ticker(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        started = time.perf_counter()
        await asyncio.sleep(0.01)
        lags.append(time.perf_counter() - started - 0.01)


async def batch(kind: str, n: int, cells: int, latency: float, folder: Path, trace: bool) -> dict[str, Any]:
    """Start `n` sandboxes at once, run `cells` cells in each, close them; measure the host."""
    service = Service(folder / f"{kind}-{n}-{trace}", simulated_launcher(latency, kind == "daytona"), latency)
    make = _factory(kind, service)
    context = validate_context("the context " * 100)
    scratches = [folder / f"{kind}-{n}-{trace}-scratch-{i}" for i in range(n)]  # each sandbox writes its own file
    for scratch in scratches:
        scratch.mkdir(exist_ok=True)
    sandboxes = [make() for _ in range(n)]
    gc.collect()
    before_rss = rss()
    if trace:
        tracemalloc.start()
    stop = asyncio.Event()
    lags: list[float] = []
    ticker = asyncio.create_task(_ticker(stop, lags))
    started = time.perf_counter()
    await asyncio.gather(
        *(s.start(SandboxSetup(context, _answer, scratch=d)) for s, d in zip(sandboxes, scratches, strict=True))
    )
    opened = time.perf_counter() - started
    heap = tracemalloc.get_traced_memory()[0] if trace else 0
    open_rss = rss()

    async def work(sandbox: RemoteSandbox) -> None:
        for _ in range(cells):
            result = await sandbox.execute("x = llm_query('p')", None)
            assert result.error is None and result.output == "ok\n", result

    await asyncio.gather(*(work(s) for s in sandboxes))
    ran = time.perf_counter() - started - opened
    await asyncio.gather(*(s.aclose() for s in sandboxes))
    total = time.perf_counter() - started
    stop.set()
    await ticker
    if trace:
        tracemalloc.stop()
    assert service.live() == [], "a sandbox was left running"
    return {
        "kind": kind,
        "sandboxes": n,
        "start_s": round(opened, 3),
        "cells_s": round(ran, 3),
        "total_s": round(total, 3),
        "cells_per_s": round(n * cells / ran, 1),
        "rss_per_sandbox_kib": round((open_rss - before_rss) / n / 1024, 1),
        "heap_per_sandbox_kib": round(heap / n / 1024, 1) if trace else None,
        "max_loop_lag_ms": round(max(lags, default=0.0) * 1000, 1),
    }


def measure_one(kind: str, n: int, cells: int, latency: float) -> dict[str, Any]:
    """One provider and size in this (fresh) process: a warm-up, the timed batch, then the heap pass."""
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        asyncio.run(batch(kind, 2, 1, 0.0, folder, trace=False))  # pay the SDK's first imports outside the clock
        row = asyncio.run(batch(kind, n, cells, latency, folder, trace=False))
        row["heap_per_sandbox_kib"] = asyncio.run(batch(kind, n, 1, latency, folder, trace=True))[
            "heap_per_sandbox_kib"
        ]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="10,100,500,1000", help="numbers of concurrent sandboxes")
    parser.add_argument("--kinds", default="modal,prime,daytona")
    parser.add_argument("--cells", type=int, default=5, help="cells per sandbox (one sub-call each)")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per SDK call and per worker frame")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # KIND:N, run in a child so memory is its own
    args = parser.parse_args(argv)
    if args.one:
        kind, n = args.one.split(":")
        print(json.dumps(measure_one(kind, int(n), args.cells, args.latency)))
        return 0
    rows: list[dict[str, Any]] = []
    for kind in args.kinds.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            options = ["--cells", str(args.cells), "--latency", str(args.latency)]
            child = subprocess.run(
                [sys.executable, "-m", "benchmarks.remote_sandbox_bench", "--one", f"{kind}:{n}", *options],
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(child.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    header = list(rows[0])
    print(" | ".join(header))
    for row in rows:
        print(" | ".join(str(row[h]) for h in header))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
