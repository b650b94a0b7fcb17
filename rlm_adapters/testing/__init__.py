"""Tools for testing code that uses rlm-adapters: a real local OpenAI-compatible server."""

from rlm_adapters.testing.fake_openai import (
    FakeOpenAIServer,
    ServerCounters,
    default_leaf,
    scripted_root,
    turn_of,
)

__all__ = ["FakeOpenAIServer", "ServerCounters", "default_leaf", "scripted_root", "turn_of"]
