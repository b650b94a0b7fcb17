"""Tools for testing code that uses rlm-adapters: real local servers speaking the providers' wire formats.

`FakeOpenAIServer` (OpenAI-compatible, also Azure OpenAI's routes), `FakeAnthropicServer` (Anthropic's
Messages API), `FakeBedrockServer` (Bedrock Converse) and `FakeGeminiServer` (the Gemini API) share one
HTTP core (`FakeModelServer`): scripted root replies, a leaf policy, latency, injected faults (errors,
``Retry-After``, hangs, trickled, oversized, reshaped or re-contented replies) and counters.

The names are loaded on first use, so that ``python -m rlm_adapters.testing.fake_openai`` runs the module
once, as a script, instead of finding it already imported by this package (runpy warns about that).
"""

from __future__ import annotations

import importlib
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
    "scripted_root",
    "turn_of",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module 'rlm_adapters.testing' has no attribute {name!r}")
