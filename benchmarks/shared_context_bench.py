"""Memory of N concurrent runs over one string context: ``python -m benchmarks.shared_context_bench``.

``[--mb 200] [--runs 1 4 8] [--environment subprocess] [--hold 3]``. The paper's headline setting (every query
over the same corpus) and a team's ``rlm-mcp`` over one repository run many queries over one context. Here one
`RLM` runs N runs at once (``asyncio.gather``) over the same ``str`` of `--mb` MB in the default sandbox; each
run's root reads ``len(context)``, holds the REPL for `--hold` seconds (so that all N overlap) and answers. A
sampler reads every 50 ms the memory of the whole process tree (the host and every process under it: bubblewrap,
the sandboxes' init, the workers) from ``/proc/<pid>/smaps_rollup``:

- ``RSS``: resident pages, a page mapped by several processes counted in each;
- ``PSS``: each shared page split between the processes that map it (what the tree costs the machine).

Reported per N: the peak of each over the host's own copy (the tree before the runs, the context built), in
MiB and in contexts, and the issue's goal (issue 41: N=8 at most 2x the context plus 50 MB per run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from pathlib import Path

from rlm_adapters import RLM, ScriptedModel

MIB = 1024**2


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def tree_memory(root: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of `root` and every process under it."""
    children = _children()
    pending, rss, pss = [root], 0, 0
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("Rss:"):
                rss += int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss += int(line.split()[1]) * 1024
    return rss, pss


class Sampler:
    """The peak of `tree_memory` while it runs, sampled on a thread."""

    def __init__(self) -> None:
        self.peak = (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            rss, pss = tree_memory(os.getpid())
            self.peak = (max(self.peak[0], rss), max(self.peak[1], pss))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def make_context(megabytes: float) -> str:
    """An ASCII string context of `megabytes` MB, lines that differ (built in C: a repeat, then joined)."""
    line = "The quick brown fox jumps over the lazy dog, line number "
    count = int(megabytes * 1e6 / (len(line) + 9))
    return "\n".join(f"{line}{i:08d}" for i in range(count))


async def _runs(context: str, n: int, environment: str, hold: float) -> list[str]:
    hold_cell = f"```repl\nimport time\nsize = len(context)\ntime.sleep({hold})\nprint(size)\n```"
    root = ScriptedModel(lambda messages: hold_cell if len(messages) <= 2 else "FINAL(held)")
    rlm = RLM(backend=root, environment=environment, max_sandboxes=max(32, n))
    results = await asyncio.gather(*(rlm.acompletion(context, "hold it") for _ in range(n)))
    return [r.response for r in results]


def measure(megabytes: float, n: int, environment: str, hold: float) -> dict[str, float]:
    """One N: the tree's peak RSS and PSS over the host's own copy, in MiB."""
    context = make_context(megabytes)
    before_rss, before_pss = tree_memory(os.getpid())
    started = time.perf_counter()
    with Sampler() as sampler:
        answers = asyncio.run(_runs(context, n, environment, hold))
    if answers != ["held"] * n:
        raise RuntimeError(f"the runs answered {answers[:3]}...")
    size = len(context) / MIB
    return {
        "runs": n,
        "context_mib": size,
        "seconds": time.perf_counter() - started,
        "rss_mib": (sampler.peak[0] - before_rss) / MIB,
        "pss_mib": (sampler.peak[1] - before_pss) / MIB,
        "goal_mib": 2 * size + 50 * n * 1e6 / MIB,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--mb", type=float, default=200.0)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--environment", default="subprocess")
    parser.add_argument("--hold", type=float, default=3.0, help="seconds each run holds its REPL")
    args = parser.parse_args(argv)
    print("| runs | context | wall | peak RSS over the host's copy | peak PSS over it | goal (2x + 50 MB/run) |")
    print("|---|---|---|---|---|---|")
    for n in args.runs:
        row = measure(args.mb, n, args.environment, args.hold)
        size, rss, pss = row["context_mib"], row["rss_mib"], row["pss_mib"]
        print(
            f"| {n} | {size:.0f} MiB | {row['seconds']:.1f} s | {rss:,.0f} MiB ({rss / size:.2f}x) "
            f"| {pss:,.0f} MiB ({pss / size:.2f}x) | {row['goal_mib']:,.0f} MiB |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
