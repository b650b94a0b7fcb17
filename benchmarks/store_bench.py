"""The shared store's added latency per model call: ``python -m benchmarks.store_bench [--quick] [--json] [--url URL]``.

What the engine adds to one model call is a lookup before it and, on a miss, a write of the reply before the run
uses it. This times exactly those, on the store objects the engine calls (`SQLiteCallCache`, `PostgresCallCache`),
with a reply of a typical sub-call's size (2 kB of text), in three shapes:

- *miss*: a fresh call, ``get`` (nothing there) then ``put`` (committed before it returns);
- *hit*: a replayed call, one ``get``;
- *miss, 16 at once*: a batch of sub-calls (``llm_query_batched``) whose lookups and writes overlap; each call's
  own latency is timed.

PostgreSQL runs on this machine with fsync on (as SQLite's ``synchronous=FULL`` does), started from Debian's
server binaries as the tests start it, unless ``--url`` names one. Both arms alternate in rounds, so that the
load of the shared cores falls on both; p50 and p99 per arm and shape are in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlm_adapters.core.cache import CachedReply, CallCache, PostgresCallCache, SQLiteCallCache

REPLY = CachedReply("x" * 2000, 1200, 400, "leaf-model", 0.0012)
BATCH = 16


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
        "n": len(ordered),
    }


async def _miss(store: CallCache, keys: list[str]) -> float:
    """A fresh call's lookup and write; its key is added to `keys`."""
    key = uuid.uuid4().hex
    started = time.perf_counter()
    if await store.get(key) is not None:
        raise RuntimeError("a fresh key was found in the store")
    await store.put(key, REPLY)
    elapsed = time.perf_counter() - started
    keys.append(key)
    return elapsed


async def _hit(store: CallCache, key: str) -> float:
    started = time.perf_counter()
    if await store.get(key) != REPLY:
        raise RuntimeError("the stored reply did not come back")
    return time.perf_counter() - started


async def _round(store: CallCache, calls: int, samples: dict[str, list[float]]) -> None:
    """`calls` misses, as many hits of what they stored, and `calls` misses in batches of `BATCH`."""
    keys: list[str] = []
    for _ in range(calls):
        samples["miss"].append(await _miss(store, keys))
    for key in keys:
        samples["hit"].append(await _hit(store, key))
    for _ in range(max(1, calls // BATCH)):
        samples[f"miss, {BATCH} at once"].extend(await asyncio.gather(*(_miss(store, []) for _ in range(BATCH))))


def measure(url: str, folder: Path, calls: int, rounds: int) -> dict[str, Any]:
    """Both stores, alternating for `rounds` rounds of `calls` calls per shape; their percentiles."""
    makers: dict[str, Callable[[], CallCache]] = {
        "sqlite": lambda: SQLiteCallCache(folder / "calls.sqlite"),
        "postgresql": lambda: PostgresCallCache(url),
    }
    stores = {name: make() for name, make in makers.items()}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"miss": [], "hit": [], f"miss, {BATCH} at once": []} for name in stores
    }
    try:

        async def run() -> None:
            for name, store in stores.items():  # warm-up: threads started, pool filled, tables cached
                await _round(store, BATCH, {k: [] for k in samples[name]})
            for _ in range(rounds):
                for name, store in stores.items():
                    await _round(store, calls, samples[name])

        asyncio.run(run())
    finally:
        for store in stores.values():
            store.close()
    return {name: {shape: _percentiles(values) for shape, values in shapes.items()} for name, shapes in samples.items()}


@contextlib.contextmanager
def local_database(url: str | None, name: str) -> Iterator[str]:
    """`url`, or else database `name` of a PostgreSQL server started here with fsync on (removed afterwards)."""
    if url is not None:
        yield url
        return
    from tests.postgres import PostgresServer

    server = PostgresServer()
    try:
        server.start(durable=True)
        yield server.create_database(name)
    finally:
        server.remove()


def on_a_database(url: str | None, name: str, measure: Callable[[str, Path], dict[str, Any]]) -> dict[str, Any]:
    """``measure(url, folder)``, with a temporary folder, on `url` or else on database `name` of a PostgreSQL
    started here (`local_database`)."""
    with local_database(url, name) as database, tempfile.TemporaryDirectory() as folder:
        return measure(database, Path(folder))


def print_results(results: dict[str, Any], *, as_json: bool, count: str) -> None:
    """The percentiles per store and shape, as a table (its last column `count`) or as JSON."""
    if as_json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'store':<14}{'shape':<20}{'p50 ms':>10}{'p99 ms':>10}{count:>8}")
    for name, shapes in results.items():
        for shape, figures in shapes.items():
            print(f"{name:<14}{shape:<20}{figures['p50_ms']:>10.3f}{figures['p99_ms']:>10.3f}{figures['n']:>8}")


def parse_args(argv: list[str] | None, doc: str | None, quick: str) -> argparse.Namespace:
    """The store benchmarks' flags: ``--quick`` (what it runs: `quick`), ``--json`` and ``--url``."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--url", default=None, help="a PostgreSQL database to use (default: one started here)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table (or JSON)."""
    args = parse_args(argv, __doc__, "CI-sized: 64 calls per shape, 2 rounds")
    calls, rounds = (64, 2) if args.quick else (500, 4)
    results = on_a_database(args.url, "store_bench", lambda url, folder: measure(url, folder, calls, rounds))
    print_results(results, as_json=args.json, count="calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
