"""Tools for testing code that uses rlm-adapters: real local servers speaking the providers' wire formats.

`FakeOpenAIServer` (OpenAI-compatible, also Azure OpenAI's routes), `FakeBedrockServer` (Bedrock Converse)
and `FakeGeminiServer` (the Gemini API) share one HTTP core: scripted root replies, a leaf policy, latency,
injected faults and counters.
"""

from rlm_adapters.testing._server import FakeModelServer
from rlm_adapters.testing.fake_bedrock import FakeBedrockServer
from rlm_adapters.testing.fake_gemini import FakeGeminiServer
from rlm_adapters.testing.fake_openai import (
    FakeOpenAIServer,
    ServerCounters,
    default_leaf,
    scripted_root,
    turn_of,
)

__all__ = [
    "FakeBedrockServer",
    "FakeGeminiServer",
    "FakeModelServer",
    "FakeOpenAIServer",
    "ServerCounters",
    "default_leaf",
    "scripted_root",
    "turn_of",
]
