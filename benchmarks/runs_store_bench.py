"""What keeping background runs in the shared store adds: ``python -m benchmarks.runs_store_bench [--quick] [--json]``.

A background run with a store is written down before its id is handed out (``rlm-mcp --store`` waits for that
write, so that any replica finds the run at once) and again when it ends; a replica asked for another's run reads
its record. This times exactly those, on the objects the server calls: `RunStore` (the ``--cache`` folder, one
fsync'd file a record) and `SharedRunStore` (PostgreSQL, with fsync on, started from Debian's server binaries as
the tests start it, unless ``--url`` names one), with a result of 20 kB (an answer with its structured content):

- *start*: ``started`` then ``flush`` (what ``rlm_query(background=true)`` waits for);
- *end*: ``ended`` with the result, then ``flush``;
- *read*: ``find`` of an ended run (what another replica, or a restart, reads).

Both arms alternate in rounds, so that the load of the shared cores falls on both; p50 and p99 in milliseconds.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from benchmarks.store_bench import _percentiles, on_a_database, parse_args, print_results
from rlm_adapters.core.cache import PostgresStore
from rlm_adapters.mcp_server.replica import Replica
from rlm_adapters.mcp_server.runs.shared_store import SharedRunStore
from rlm_adapters.mcp_server.runs.store import RunStore, runs_path

ARGUMENTS = {"query": "What does the log say about the outage?", "paths": ["logs/app.log"]}
RESULT = {"content": [{"type": "text", "text": "x" * 10_000}], "structuredContent": {"answer": "y" * 10_000}}
SHAPES = ("start", "end", "read")


def _round(store: RunStore | SharedRunStore, runs: int, samples: dict[str, list[float]]) -> None:
    ids = [secrets.token_urlsafe(16) for _ in range(runs)]
    for run_id in ids:
        began = time.perf_counter()
        store.started(run_id, "bearer:bench", ARGUMENTS)
        store.flush()
        samples["start"].append(time.perf_counter() - began)
    for run_id in ids:
        began = time.perf_counter()
        store.ended(run_id, "bearer:bench", "done", RESULT)
        store.flush()
        samples["end"].append(time.perf_counter() - began)
    for run_id in ids:
        began = time.perf_counter()
        found = store.find("bearer:bench", run_id)
        samples["read"].append(time.perf_counter() - began)
        if found is None or found.result != RESULT:
            raise RuntimeError("an ended run did not come back as it was written")


def measure(url: str, folder: Path, runs: int, rounds: int) -> dict[str, Any]:
    """Both stores, alternating for `rounds` rounds of `runs` runs; their percentiles per shape."""
    replica = Replica()
    stores: dict[str, RunStore | SharedRunStore] = {
        "cache folder": RunStore(runs_path(folder / "calls.sqlite"), runs * (rounds + 1), 3600.0),
        "postgresql": SharedRunStore(PostgresStore(url), runs * (rounds + 1), 3600.0, replica),
    }
    samples: dict[str, dict[str, list[float]]] = {name: {shape: [] for shape in SHAPES} for name in stores}
    try:
        for store in stores.values():  # warm-up: threads started, pool filled, tables cached
            _round(store, 8, {shape: [] for shape in SHAPES})
        for _ in range(rounds):
            for name, store in stores.items():
                _round(store, runs, samples[name])
    finally:
        for store in stores.values():
            store.close()
    return {name: {shape: _percentiles(values) for shape, values in shapes.items()} for name, shapes in samples.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table (or JSON)."""
    args = parse_args(argv, __doc__, "CI-sized: 32 runs, 2 rounds")
    runs, rounds = (32, 2) if args.quick else (200, 4)
    results = on_a_database(args.url, "runs_store_bench", lambda url, folder: measure(url, folder, runs, rounds))
    print_results(results, as_json=args.json, count="runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
