"""Tools for testing code that uses rlm-adapters: real local servers speaking the providers' wire formats.

`FakeOpenAIServer` (OpenAI-compatible, also Azure OpenAI's routes), `FakeAnthropicServer` (Anthropic's
Messages API), `FakeBedrockServer` (Bedrock Converse) and `FakeGeminiServer` (the Gemini API) share one
HTTP core (`FakeModelServer`): scripted root replies, a leaf policy, latency, injected faults (errors,
``Retry-After``, hangs, trickled, oversized, reshaped or re-contented replies) and counters.

The names are loaded on first use, so that ``python -m rlm_adapters.testing.fake_openai`` runs the module
once, as a script, instead of finding it already imported by this package (runpy warns about that).

`reset_process_state` puts back what the package keeps per process (docs/internals.md, "Process-wide state").
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlm_adapters.testing._server import FakeModelServer
    from rlm_adapters.testing.fake_anthropic import FakeAnthropicServer
    from rlm_adapters.testing.fake_bedrock import FakeBedrockServer
    from rlm_adapters.testing.fake_gemini import FakeGeminiServer
    from rlm_adapters.testing.fake_openai import (
        FakeOpenAIServer,
        ServerCounters,
        default_leaf,
        scripted_root,
        turn_of,
    )

_MODULES = {
    "FakeAnthropicServer": "rlm_adapters.testing.fake_anthropic",
    "FakeBedrockServer": "rlm_adapters.testing.fake_bedrock",
    "FakeGeminiServer": "rlm_adapters.testing.fake_gemini",
    "FakeModelServer": "rlm_adapters.testing._server",
    "FakeOpenAIServer": "rlm_adapters.testing.fake_openai",
    "ServerCounters": "rlm_adapters.testing.fake_openai",
    "default_leaf": "rlm_adapters.testing.fake_openai",
    "scripted_root": "rlm_adapters.testing.fake_openai",
    "turn_of": "rlm_adapters.testing.fake_openai",
}

__all__ = [
    "FakeAnthropicServer",
    "FakeBedrockServer",
    "FakeGeminiServer",
    "FakeModelServer",
    "FakeOpenAIServer",
    "ServerCounters",
    "default_leaf",
    "reset_process_state",
    "scripted_root",
    "turn_of",
]


def reset_process_state() -> None:
    """Put back everything the package keeps per process, as a fresh interpreter has it (for tests).

    The sandbox layer: the host's ``sys.stdout`` / ``sys.stderr`` (local sandboxes' stream routing), the
    background clean-up thread (its jobs finished first), the idle spare workers and their demand, the
    launcher probes and the worker's compiled bytecode; the model layer: the concurrency limits learnt per
    endpoint; the documents converted so far (`rlm_adapters.documents.CONVERSIONS`). A module not loaded yet holds nothing and is not
    loaded for this.

    Raises:
        RuntimeError: The clean-up jobs handed over did not finish within 30 s.
    """
    from rlm_adapters.core.sandbox.programs.worker import ROUTING
    from rlm_adapters.core.sandbox.reaper import REAPER

    ROUTING.reset()
    if not REAPER.flush(30.0):  # closes in progress hand their workers back to the pool first
        raise RuntimeError("the sandbox clean-up jobs did not finish within 30 s")
    loaded = sys.modules
    if (spares := loaded.get("rlm_adapters.core.sandbox.subprocess.spares")) is not None:
        spares.POOL.reset()
    if (isolation := loaded.get("rlm_adapters.core.sandbox.subprocess.isolation")) is not None:
        isolation.forget_probes()
    if (bytecode := loaded.get("rlm_adapters.core.sandbox.subprocess.bytecode")) is not None:
        bytecode.forget_bytecode()
    if (limiter := loaded.get("rlm_adapters.core.lm.limiter")) is not None:
        limiter.forget_learned_limits()
    if (conversions := loaded.get("rlm_adapters.documents._cache")) is not None:
        conversions.forget_conversions()
    if not REAPER.reset(30.0):
        raise RuntimeError("the sandbox clean-up jobs did not finish within 30 s")


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module 'rlm_adapters.testing' has no attribute {name!r}")
