"""Tools for testing code that uses rlm-adapters: a real local OpenAI-compatible server.

The names are loaded on first use, so that ``python -m rlm_adapters.testing.fake_openai`` runs the module
once, as a script, instead of finding it already imported by this package (runpy warns about that).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlm_adapters.testing.fake_openai import (
        FakeOpenAIServer,
        ServerCounters,
        default_leaf,
        scripted_root,
        turn_of,
    )

__all__ = ["FakeOpenAIServer", "ServerCounters", "default_leaf", "scripted_root", "turn_of"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("rlm_adapters.testing.fake_openai"), name)
    raise AttributeError(f"module 'rlm_adapters.testing' has no attribute {name!r}")
