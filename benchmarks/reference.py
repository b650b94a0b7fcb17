"""The reference arm: the same scenarios through `rlms` 0.1.3 (import `rlm`), when it is installed.

The reference runs with its defaults (``local`` REPL, 16 batched sub-calls in flight, 4 nested RLMs at a
time) and its OpenAI backend pointed at the fake server through ``base_url``.
"""

from __future__ import annotations

import gc
import importlib.metadata
import importlib.util
import time
from typing import Any

from benchmarks.scenarios import Scenario, client_kwargs
from benchmarks.server import PARENT_MARKER

REFERENCE_VERSION = "0.1.3"


def available() -> str | None:
    """None when the reference can run here, else why not (shown in the report)."""
    if importlib.util.find_spec("rlm") is None:
        return 'rlms is not installed (pip install -e ".[bench]")'
    try:
        version = importlib.metadata.version("rlms")
    except importlib.metadata.PackageNotFoundError:
        return "the `rlm` module found is not the rlms distribution"
    if version != REFERENCE_VERSION:
        return f"rlms {version} is installed; the benchmarks pin {REFERENCE_VERSION}"
    return None


def make_reference(url: str, scenario: Scenario, log_dir: str | None = None) -> Any:
    """The reference's `RLM`, with the same models, depth and iteration cap as ours."""
    from rlm import RLM  # type: ignore[import-untyped]
    from rlm.logger import RLMLogger  # type: ignore[import-untyped]

    return RLM(
        backend="openai",
        backend_kwargs=client_kwargs(url, "root-model"),
        other_backends=["openai"],
        other_backend_kwargs=[client_kwargs(url, "leaf-model")],
        environment="local",
        max_depth=scenario.max_depth,
        max_iterations=10,
        logger=RLMLogger(log_dir=log_dir) if log_dir else None,
    )


def run_reference(rlm: Any, context: Any) -> float:
    """One reference run; returns its wall time in seconds."""
    started = time.perf_counter()
    result = rlm.completion(context, root_prompt=f"{PARENT_MARKER}: answer the question.")
    elapsed = time.perf_counter() - started
    # The reference leaves its async OpenAI clients open. Collected later, inside our next run's event
    # loop, they would schedule their aclose() there and print "Event loop is closed" tracebacks; collected
    # now, with no loop running, they go quietly.
    gc.collect()
    if not str(result.response).strip():
        raise RuntimeError("the reference run returned no answer")
    return elapsed
