"""LlamaIndex adapters: `RLMQueryEngine` answers over all documents, `RLMFunctionCallingLLM` is an RLM as
an LLM with tool calling (an agent's own model, as `FunctionAgent` needs).

    engine = RLMQueryEngine.from_paths(["docs/"], llm=llm)   # PDFs and Office files converted behind the walls
    agent = FunctionAgent(tools=[search], llm=RLMFunctionCallingLLM(llm=llm))

The modules of this package are private; the names below are its public surface.
"""

# ruff: noqa: E402  (llama-index-core is imported after `require` so a missing extra names itself)
from __future__ import annotations

from rlm_adapters._extras import require

require("llama_index.core", extra="llama-index", feature="RLMQueryEngine")

from rlm_adapters.llama_index._llm import RLMFunctionCallingLLM
from rlm_adapters.llama_index._query_engine import DOCUMENT_INSTRUCTIONS, LlamaIndexClient, RLMEvent, RLMQueryEngine

__all__ = ["DOCUMENT_INSTRUCTIONS", "LlamaIndexClient", "RLMEvent", "RLMFunctionCallingLLM", "RLMQueryEngine"]
