"""The benchmark scenarios (issue 7), our engine's arm, and the fan-out floor.

Every scenario is one script of root replies played by the shared fake server to both engines, with the
number of root and leaf requests it must produce: a run whose counters differ is a failed run, so no
speed-up can come from skipping calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from benchmarks.server import PARENT_MARKER, Script, Side, batched, final
from rlm_adapters import RLM, RLMLogger
from rlm_adapters.testing.fake_openai import ROOT_MARKER

Kind = Literal["timing", "context", "growth"]
SERVER_WIDTH_1000 = 200  # the 1,000-call scenario's server answers 429 past this many requests in flight
LINE = "the quick brown fox jumps over the lazy dog; filler line 0123456\n"  # 64 ASCII characters
MAGIC_PROMPT = "The magic number is 424242. Find it in: "


@dataclass(frozen=True)
class Scenario:
    """One benchmark scenario.

    Attributes:
        name: Short identifier (the table's first column).
        title: What it measures, in words.
        script: The root replies.
        latency: Seconds every model request waits.
        root_calls: Root requests one run must make (checked on the server).
        leaf_calls: Leaf requests one run must make (checked on the server).
        max_depth: Recursion depth for both engines (2 for real nested RLMs).
        reps: Alternating repetitions (ours, reference, floor) whose median is reported.
        floor_prompts: For fan-out, the sub-calls the floor makes straight through the SDK.
        server_width: Requests the server takes at once (429 past it, like a provider's cap); the floor
            sends exactly this many at a time, None: the server takes everything at once.
        kind: ``timing`` (in this process), ``context`` / ``growth`` (a fresh subprocess per size).
        sizes_mb: Context sizes for ``context`` / ``growth``.
        per: Divide the time by this (per-run or per-nested-run overheads).
        reference: Whether the reference (`rlms`) runs it too.
        peers: Whether the peers (`minrlm`, `rlmflow`, see `benchmarks.peers`) run it too.
    """

    name: str
    title: str
    script: Script
    latency: float
    root_calls: int
    leaf_calls: int
    max_depth: int = 1
    reps: int = 3
    floor_prompts: int | None = None
    server_width: int | None = None
    kind: Kind = "timing"
    sizes_mb: tuple[float, ...] = ()
    per: int = 1
    reference: bool = True
    peers: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def fan_out(
    n: int,
    latency: float,
    reps: int,
    server_width: int | None = None,
    reference: bool = True,
    peers: bool = False,
    name: str | None = None,
) -> Scenario:
    """One root turn issuing `llm_query_batched` of `n` prompts."""

    def turn(side: Side) -> str:
        prompts = f"[f'item {{i}}: the magic number is {{1000 + i}}' for i in range({n})]"
        return f"answers = {batched(side, prompts)}\nassert len(answers) == {n}, len(answers)\n" + final(
            side, "str(len(answers))"
        )

    return Scenario(
        name or f"fan-out {n}",
        f"1 root turn, llm_query_batched of {n} prompts at {latency:g} s"
        + (f", the server taking {server_width} at once (429 past it)" if server_width else ""),
        Script((turn,)),
        latency,
        1,
        n,
        reps=reps,
        floor_prompts=n,
        server_width=server_width,
        reference=reference,
        peers=peers,
    )


def nested(children: int, latency: float, reps: int) -> Scenario:
    """`rlm_query_batched` of `children` nested RLMs, each playing two root turns."""

    def parent(side: Side) -> str:
        return f"results = rlm_query_batched([f'child task {{i}}' for i in range({children})])\n" + final(
            side, "str(len(results))"
        )

    child = (lambda side: "print(len(context))", lambda side: final(side, "'child done'"))
    return Scenario(
        f"nested {children}",
        f"{children} rlm_query children x 2 root turns at {latency:g} s",
        Script((parent,), child),
        latency,
        1 + 2 * children,
        0,
        max_depth=2,
        reps=reps,
    )


def overhead_run(runs: int) -> Scenario:
    """A one-turn run at zero latency (reported per run)."""
    return Scenario(
        "overhead/run",
        "one-turn run at 0 s latency (per run)",
        Script((lambda side: final(side, "'ok'"),)),
        0.0,
        1,
        0,
        reps=runs,
        peers=True,
    )


def overhead_fan_out(n: int, reps: int) -> Scenario:
    """The fan-out run at zero latency: its fixed overhead (issue 30: at most 0.25 s for 64)."""
    return fan_out(n, 0.0, reps, peers=True, name=f"overhead/fan-out {n}")


def overhead_nested(children: int, reps: int) -> Scenario:
    """`children` sequential one-turn nested RLMs in one root turn, at zero latency (per nested run)."""

    def parent(side: Side) -> str:
        return f"r = [rlm_query(f'child task {{i}}') for i in range({children})]\n" + final(side, "str(len(r))")

    return Scenario(
        "overhead/nested",
        f"{children} sequential one-turn nested runs at 0 s (per nested run, minus a run)",
        Script((parent,), (lambda side: final(side, "'child done'"),)),
        0.0,
        1 + children,
        0,
        max_depth=2,
        reps=reps,
        per=children,
    )


def three_turns() -> Script:
    """The context scenarios' run: look, one sub-call over a slice, answer."""
    return Script(
        (
            lambda side: "print(len(context))\nprint(context[:200])",
            lambda side: f"note = llm_query({MAGIC_PROMPT!r} + context[:4000])\nprint(note)",
            lambda side: final(side, "note"),
        )
    )


def context_sizes(sizes: tuple[float, ...], *, reference: bool = True) -> Scenario:
    """The three-turn run over contexts of `sizes` MB, each in a fresh process."""
    return Scenario(
        "context",
        "three-turn run over a large context (fresh process per size)",
        three_turns(),
        0.0,
        3,
        1,
        reps=1,
        kind="context",
        sizes_mb=sizes,
        reference=reference,
    )


def growth(sizes: tuple[float, ...]) -> Scenario:
    """Our engine alone as the context doubles."""
    return Scenario(
        "growth",
        "cost as the context doubles (our engine)",
        three_turns(),
        0.0,
        3,
        1,
        reps=1,
        kind="growth",
        sizes_mb=sizes,
        reference=False,
    )


def build(quick: bool) -> list[Scenario]:
    """The issue's scenarios, or the CI-sized ``--quick`` set (same shapes, smaller numbers)."""
    if quick:
        return [
            fan_out(64, 0.02, 1, peers=True),
            nested(4, 0.02, 1),
            overhead_run(2),
            overhead_fan_out(64, 1),
            overhead_nested(2, 1),
            context_sizes((1,)),
            growth((1, 2)),
        ]
    return [
        fan_out(64, 0.5, 3, peers=True),
        # The reference sends all 1,000 at once and has no answer to a 429 but to fail the call.
        fan_out(1000, 0.2, 3, server_width=SERVER_WIDTH_1000, reference=False),
        nested(16, 0.1, 3),
        overhead_run(10),
        overhead_fan_out(64, 5),
        overhead_nested(4, 3),
        context_sizes((1, 10, 50, 100)),
        growth(tuple(float(2**k) for k in range(9))),
    ]


def make_context(mb: float) -> str:
    """An ASCII text of `mb` MiB (one allocation, so the host's peak memory is not inflated by copies)."""
    return LINE * max(1, int(mb * 2**20) // len(LINE))


def client_kwargs(url: str, model: str) -> dict[str, Any]:
    """Backend settings for a model on the fake server (same for both engines)."""
    return {"model_name": model, "base_url": url, "api_key": "bench", "max_retries": 0}


def make_ours(url: str, scenario: Scenario, log_dir: str | None = None) -> RLM:
    """Our engine with its defaults (subprocess sandbox, adaptive concurrency), pointed at the fake server."""
    return RLM(
        backend="openai",
        backend_kwargs=client_kwargs(url, "root-model"),
        other_backends=["openai"],
        other_backend_kwargs=[client_kwargs(url, "leaf-model")],
        max_depth=scenario.max_depth,
        max_iterations=10,
        logger=RLMLogger(log_dir) if log_dir else None,
    )


def run_ours(rlm: RLM, context: Any) -> float:
    """One run; returns its wall time in seconds."""
    started = time.perf_counter()
    result = rlm.completion(context, f"{PARENT_MARKER}: answer the question.")
    elapsed = time.perf_counter() - started
    if result.finish_reason != "final":
        raise RuntimeError(f"our run ended with {result.finish_reason!r}: {result.error}")
    return elapsed


async def _floor(url: str, prompts: int, concurrency: int) -> float:
    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)
    try:
        started = time.perf_counter()
        await client.chat.completions.create(
            model="root-model",
            messages=[{"role": "system", "content": ROOT_MARKER}, {"role": "user", "content": PARENT_MARKER}],
        )
        texts = [f"item {i}: the magic number is {1000 + i}" for i in range(prompts)]
        for start in range(0, prompts, concurrency):
            await asyncio.gather(
                *(
                    client.chat.completions.create(model="leaf-model", messages=[{"role": "user", "content": t}])
                    for t in texts[start : start + concurrency]
                )
            )
        return time.perf_counter() - started
    finally:
        await client.close()


def run_floor_threads(url: str, prompts: int) -> float:
    """The same calls through the SDK's sync client, one thread per prompt (the peers' way), all at once.

    Not the floor for an async engine: it shows what the async client stack itself costs next to threads.
    """
    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)
    texts = [f"item {i}: the magic number is {1000 + i}" for i in range(prompts)]
    try:
        with concurrent.futures.ThreadPoolExecutor(prompts) as pool:
            started = time.perf_counter()
            client.chat.completions.create(
                model="root-model",
                messages=[{"role": "system", "content": ROOT_MARKER}, {"role": "user", "content": PARENT_MARKER}],
            )
            leaf = functools.partial(client.chat.completions.create, model="leaf-model")
            list(pool.map(lambda t: leaf(messages=[{"role": "user", "content": t}]), texts))
            return time.perf_counter() - started
    finally:
        client.close()


def run_floor(url: str, prompts: int, concurrency: int | None = None) -> float:
    """The same calls straight through the SDK: one root call, then the prompts in waves of `concurrency`.

    `concurrency` is what the server takes at once (None: all prompts in one wave): the floor is what the
    server allows, not what our engine's defaults would send. The client is created before the clock
    starts: the floor is the calls alone.
    """
    concurrency = concurrency or prompts
    return asyncio.run(_floor(url, prompts, concurrency))
