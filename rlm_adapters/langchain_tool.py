"""Compatibility module: `RLMTool` now lives in `rlm_adapters.langchain`; import it from there.

Kept so that ``from rlm_adapters.langchain_tool import RLMTool`` goes on working.
"""

# ruff: noqa: E402  (langchain-core is imported after `require` so a missing extra names itself)
from __future__ import annotations

from rlm_adapters._extras import require

require("langchain_core", extra="langchain", feature="RLMTool")

from rlm_adapters.langchain import RLMTool, RLMToolInput

__all__ = ["RLMTool", "RLMToolInput"]
