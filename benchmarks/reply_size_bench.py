"""Host memory for one oversized model reply, with and without the reply size cap (issue 24, defect 10).

A fake OpenAI-compatible server in this process streams a valid chat completion whose text is ``--mib`` MiB
(it never holds the reply). A child process (so that its peak is its own) makes one call through
`OpenAIClient` and reports its peak resident memory (``ru_maxrss``) above what it held before the call:

- ``uncapped``: ``max_reply_bytes`` above the reply's size, so the whole reply is read, as before the cap;
- ``capped``: the default ``max_reply_bytes`` (32 MiB): the declared ``Content-Length`` is refused at once;
- ``chunked``: the same reply without a ``Content-Length``: reading stops at the cap, the call fails cleanly.

Run: ``python -m benchmarks.reply_size_bench --mib 800`` (the uncapped case needs about 3.5 x that in memory).
``--cap none`` sends no ``max_reply_bytes`` at all (for code that predates it; ``--chunked`` to send no length).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass

from rlm_adapters.testing import FakeOpenAIServer

MIB = 2**20

CHILD = """
import asyncio, json, resource, sys, time
from rlm_adapters.core.lm.openai_client import OpenAIClient
from rlm_adapters.errors import ModelError

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

async def main(url, cap):
    extra = {} if cap is None else {"max_reply_bytes": cap}
    client = OpenAIClient("big", base_url=url, api_key="k", max_retries=0, timeout=600, **extra)
    before = peak_mib()
    started = time.perf_counter()
    try:
        reply = await client.acomplete([{"role": "user", "content": "hi"}])
        outcome = f"read {len(reply.text) / 2**20:.0f} MiB"
    except ModelError as exc:
        outcome = "ModelError: " + str(exc).split(" failed: ", 1)[-1][:100]
    seconds = time.perf_counter() - started
    await client.aclose()
    print(json.dumps({"before": before, "peak": peak_mib(), "seconds": seconds, "outcome": outcome}))

asyncio.run(main(sys.argv[1], None if sys.argv[2] == "none" else int(sys.argv[2])))
"""


@dataclass(frozen=True)
class Measure:
    """One call's figures."""

    case: str
    reply_mib: int
    cap: str
    peak_mib: float
    above_start_mib: float
    seconds: float
    outcome: str


def measure(case: str, reply_mib: int, cap: int | None, *, chunked: bool = False) -> Measure:
    """One call in a child process against a server streaming a `reply_mib` MiB reply."""
    with FakeOpenAIServer() as server:
        server.huge_next(reply_mib * MIB, chunked=chunked)
        done = subprocess.run(
            [sys.executable, "-c", CHILD, server.base_url, "none" if cap is None else str(cap)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"the measuring child failed: {done.stderr[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    return Measure(
        case=case,
        reply_mib=reply_mib,
        cap="none sent" if cap is None else f"{cap / MIB:g} MiB",
        peak_mib=figures["peak"],
        above_start_mib=figures["peak"] - figures["before"],
        seconds=figures["seconds"],
        outcome=figures["outcome"],
    )


def main(argv: list[str] | None = None) -> int:
    """Measure the uncapped and the capped call and print a table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.reply_size_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=int, default=256, help="size of the reply's text in MiB (default 256)")
    parser.add_argument(
        "--cap", default=None, help="only this max_reply_bytes (bytes, or 'none' to send none) instead of the cases"
    )
    parser.add_argument("--chunked", action="store_true", help="with --cap: send the reply without Content-Length")
    args = parser.parse_args(argv)
    cases: list[tuple[str, int | None, bool]]
    if args.cap is None:
        cases = [("uncapped", (args.mib + 1) * MIB, False), ("capped", 32 * MIB, False), ("chunked", 32 * MIB, True)]
    else:
        cases = [("as asked", None if args.cap == "none" else int(args.cap), args.chunked)]
    started = time.perf_counter()
    rows = [measure(case, args.mib, cap, chunked=chunked) for case, cap, chunked in cases]
    print(f"{'case':<10} {'reply':>8} {'cap':>12} {'peak RSS':>10} {'above start':>12} {'seconds':>8}  outcome")
    for row in rows:
        print(
            f"{row.case:<10} {row.reply_mib:>5} MiB {row.cap:>12} {row.peak_mib:>6.0f} MiB"
            f" {row.above_start_mib:>8.0f} MiB {row.seconds:>8.2f}  {row.outcome}"
        )
    print(f"({time.perf_counter() - started:.1f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
