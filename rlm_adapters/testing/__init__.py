"""Tools for testing code that uses rlm-adapters: real local servers speaking the providers' wire formats.

`FakeOpenAIServer` (OpenAI-compatible, also Azure OpenAI's routes), `FakeAnthropicServer` (Anthropic's
Messages API, billing its prompt cache), `FakeBedrockServer` (Bedrock Converse) and `FakeGeminiServer` (the
Gemini API) share one HTTP core (`FakeModelServer`): scripted root replies, a leaf policy, latency, injected
faults (errors, ``Retry-After``, hangs, trickled, oversized, reshaped or re-contented replies) and counters.
`by_turn(*replies)` is an in-process root model replying by turn of its conversation (`scripted_root` is the
same policy for a fake server, `turn_of` counts a turn).

The names are loaded on first use, so that ``python -m rlm_adapters.testing.fake_openai`` runs the module
once, as a script, instead of finding it already imported by this package (runpy warns about that).

`reset_process_state` puts back what the package keeps per process (docs/internals.md, "Process-wide state").
"""

from __future__ import annotations

import importlib
import operator
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
    from rlm_adapters.testing.turns import by_turn

_MODULES = {
    "FakeAnthropicServer": "rlm_adapters.testing.fake_anthropic",
    "FakeBedrockServer": "rlm_adapters.testing.fake_bedrock",
    "FakeGeminiServer": "rlm_adapters.testing.fake_gemini",
    "FakeModelServer": "rlm_adapters.testing._server",
    "FakeOpenAIServer": "rlm_adapters.testing.fake_openai",
    "ServerCounters": "rlm_adapters.testing.fake_openai",
    "by_turn": "rlm_adapters.testing.turns",
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
    "by_turn",
    "default_leaf",
    "reset_process_state",
    "scripted_root",
    "turn_of",
]


# What the rest of the package keeps per process, reset after the sandbox layer's: module -> the resets
# (attribute paths in it) to call when it is loaded. Caches of facts (an SDK's signature, a TLS context,
# word lists) are forgotten too, so that the next use computes them afresh.
_RESETS: dict[str, tuple[str, ...]] = {
    "rlm_adapters.core.sandbox.context_store": ("CONTEXTS.reset",),
    "rlm_adapters.core.sandbox.tempdirs": ("forget",),
    "rlm_adapters.core.lm.limiter": ("forget_learned_limits",),
    "rlm_adapters.core.lm.registry": ("forget_registered_backends",),
    "rlm_adapters.core.pricing": ("forget_prices",),
    "rlm_adapters.core.lm.openai_client": ("request_keys.cache_clear",),
    "rlm_adapters.core.lm._sdk_setup": ("shared_ssl_context.cache_clear", "_platform.cache_clear"),
    "rlm_adapters.core.lm._http": ("_stream_class.cache_clear",),
    "rlm_adapters.core.lm.bedrock_client": ("converse_request_keys.cache_clear",),
    "rlm_adapters.core.lm.litellm_client": ("accepted_keys.cache_clear",),
    "rlm_adapters.evals.arms.reference": ("restore_reference",),
    "rlm_adapters.evals.tokens": ("get_encoding.cache_clear",),
    "rlm_adapters.evals.tasks.sniah": ("key_words.cache_clear",),
    "rlm_adapters.evals.tasks.oolong_window": ("load_pool.cache_clear",),
    "rlm_adapters.documents._cache": ("forget_conversions",),
    "rlm_adapters.documents._dependencies": ("forget_dependencies",),
}


def reset_process_state() -> None:
    """Put back everything the package keeps per process, as a fresh interpreter has it (for tests).

    The sandbox layer: the host's ``sys.stdout`` / ``sys.stderr`` (local sandboxes' stream routing), the background
    clean-up thread (its jobs finished first), the idle spare workers and their demand, the shared context files,
    the launcher probes, the worker's compiled bytecode and the temp dirs already swept. The model layer: the
    concurrency limits learnt per endpoint, the backends added with ``register_backend``, the prices registered and
    the unpriced models already named, the SDKs' cached signatures and TLS context. The evals: the reference RLM's
    ``get_client`` and the clients registered with it, cached tokenizers and word lists. The documents: the
    conversions cached by content hash, the folders of the converters' libraries. A module not loaded yet holds
    nothing and is not loaded for this (the whole list: docs/internals.md, "Process-wide state").

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
    if not REAPER.reset(30.0):
        raise RuntimeError("the sandbox clean-up jobs did not finish within 30 s")
    for name, resets in _RESETS.items():
        if (module := loaded.get(name)) is not None:
            for reset in resets:
                operator.attrgetter(reset)(module)()


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module 'rlm_adapters.testing' has no attribute {name!r}")
