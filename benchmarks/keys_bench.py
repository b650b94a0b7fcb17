"""What a store key adds to a request and to each model call: ``python -m benchmarks.keys_bench [--quick] [--json]``.

A server looks a request's key up in the store (`KeyStore.lookup`; a key found is remembered 2 s), and each model
call of the key's run holds its worst-case price before it is sent and settles what it cost after
(`KeyStore.hold`, `KeyStore.settle`, each one transaction; the engine runs them in threads beside the call).
This times those on a PostgreSQL server started here with fsync on (as the tests start it), or ``--url``'s:

- *lookup*: a request's key, asked of the store;
- *lookup, remembered*: the same within 2 s;
- *hold + settle*: one model call's bookkeeping, on a key whose spend already has rows.

p50 and p99 in milliseconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from benchmarks.store_bench import _percentiles, local_database, parse_args
from rlm_adapters.core.cache import KeyStore, PostgresStore


def _timed(job: Callable[[], object], times: int) -> list[float]:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        job()
        samples.append(time.perf_counter() - started)
    return samples


def measure(url: str, calls: int) -> dict[str, Any]:
    """Each shape `calls` times against the database at `url`; their percentiles."""
    database = PostgresStore(url)
    try:
        asked, remembered = KeyStore(database, lookup_seconds=0), KeyStore(database)
        secret = asked.add(f"bench-{time.time_ns()}", 1_000_000.0, "day")
        name = asked.lookup(secret).name  # type: ignore[union-attr]

        def call() -> None:
            asked.settle(name, asked.hold(name, 0.01), "leaf-model", 1200, 400, 0.001, False)

        for _ in range(16):  # warm-up: the pool filled, the tables cached
            call()
        remembered.lookup(secret)
        samples = {
            "lookup": _timed(lambda: asked.lookup(secret), calls),
            "lookup, remembered": _timed(lambda: remembered.lookup(secret), calls),
            "hold + settle": _timed(call, calls),
        }
    finally:
        database.close()
    return {shape: _percentiles(values) for shape, values in samples.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its table (or JSON)."""
    args = parse_args(argv, __doc__, "CI-sized: 64 of each")
    with local_database(args.url, "keys_bench") as url:
        results = measure(url, 64 if args.quick else 1000)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'shape':<22}{'p50 ms':>10}{'p99 ms':>10}{'n':>8}")
    for shape, figures in results.items():
        print(f"{shape:<22}{figures['p50_ms']:>10.3f}{figures['p99_ms']:>10.3f}{figures['n']:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
