"""The peer arms: the fan-out and overhead scenarios through `minrlm` and `rlmflow`, when they are installed.

Both peers run model code in-process with no isolation (minrlm's `PythonREPL`, rlmflow's `LocalRuntime`), so
they are the unsandboxed speed our default sandbox is measured against (issue 30). Each is pointed at the fake
server through its own OpenAI client's ``base_url``; rlmflow runs with ``max_concurrency`` 64 (its default is
the CPU count, which would run the 64 sub-calls two at a time). Versions are pinned by the ``bench`` extra.
"""

from __future__ import annotations

import gc
import importlib.metadata
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.scenarios import Scenario
from benchmarks.server import PARENT_MARKER

RLMFLOW_CONCURRENCY = 64


@dataclass(frozen=True)
class Peer:
    """One peer engine: its distribution, the pinned version, and how to build and run it."""

    name: str
    version: str
    make: Callable[[str, Scenario], Callable[[], Any]]
    run: Callable[[Any, str], str]

    def available(self) -> str | None:
        """None when this peer can run here, else why not (shown in the report)."""
        try:
            installed = importlib.metadata.version(self.name)
        except importlib.metadata.PackageNotFoundError:
            return f'{self.name} is not installed (pip install -e ".[bench]")'
        if installed != self.version:
            return f"{self.name} {installed} is installed; the benchmarks pin {self.version}"
        return None


def _make_minrlm(url: str, scenario: Scenario) -> Callable[[], Any]:
    from minrlm import RLM  # type: ignore[import-untyped]

    # One model for the root and the sub-calls is minrlm's design; the server tells them apart by prompt.
    # Its batch runs `asyncio.run` on its AsyncOpenAI client, whose connections die with that loop: a
    # second run on the same engine loses sub-calls, so every run gets a fresh engine.
    return lambda: RLM(model="root-model", base_url=url, api_key="bench", max_iterations=10)


def _run_minrlm(engine: Any, context: str) -> str:
    return str(engine.completion(f"{PARENT_MARKER}: answer the question.", context).response)


def _make_rlmflow(url: str, scenario: Scenario) -> Callable[[], Any]:
    from rlmflow import OpenAIClient, RLMConfig, RLMFlow  # type: ignore[import-untyped]
    from rlmflow.runtime.local import LocalRuntime  # type: ignore[import-untyped]

    config = RLMConfig(max_depth=scenario.max_depth, max_iterations=10, max_concurrency=RLMFLOW_CONCURRENCY)
    client = OpenAIClient("root-model", base_url=url, api_key="bench", max_retries=0)
    # A flow's session holds one run's graph, so each run gets a fresh flow on the shared client.
    return lambda: RLMFlow(llm_client=client, runtime=LocalRuntime(), config=config)


def _run_rlmflow(flow: Any, context: str) -> str:
    return str(flow.run(f"{PARENT_MARKER}: answer the question.", context=context))


PEERS: tuple[Peer, ...] = (
    Peer("minrlm", "0.1.5", _make_minrlm, _run_minrlm),
    Peer("rlmflow", "0.3.2", _make_rlmflow, _run_rlmflow),
)


def run_peer(peer: Peer, make: Callable[[], Any], context: str) -> float:
    """One run of `peer` on an engine from `make` (built before the clock starts); returns its wall time."""
    engine = make()
    started = time.perf_counter()
    answer = peer.run(engine, context)
    elapsed = time.perf_counter() - started
    gc.collect()  # as for the reference: collect the peer's clients now, outside anyone's event loop
    if not answer.strip() or answer in ("No output", "Max iterations reached."):
        raise RuntimeError(f"{peer.name} returned no answer ({answer!r})")
    return elapsed
