"""`ChatRLM`: a Recursive Language Model as a LangChain chat model, and `RLMTool` for agents.

Swap `ChatRLM` into an existing chain and the conversation becomes the RLM's context: it lives in a
sandboxed REPL instead of the prompt, and the root model answers the last human message by writing code
and calling sub-models. Any LangChain chat model can be the root or the sub model.

The modules of this package are private; the names below are its public surface.
"""

# ruff: noqa: E402  (langchain-core is imported after `require` so a missing extra names itself)
from __future__ import annotations

from rlm_adapters._extras import require

require("langchain_core", extra="langchain", feature="ChatRLM")

from rlm_adapters.langchain._callbacks import PROGRESS_EVENT, event_payload
from rlm_adapters.langchain._chat import ChatRLM
from rlm_adapters.langchain._messages import conversation_to_context
from rlm_adapters.langchain._rlm_tool import RLMTool, RLMToolInput

__all__ = ["PROGRESS_EVENT", "ChatRLM", "RLMTool", "RLMToolInput", "conversation_to_context", "event_payload"]

# Name the public module, not the private one, in reprs, pickles and LangChain's serialized ids
# (``["rlm_adapters", "langchain", "ChatRLM"]``, as before the split), the way httpx does.
for _name in ("ChatRLM", "RLMTool", "RLMToolInput", "conversation_to_context", "event_payload"):
    globals()[_name].__module__ = __name__
del _name
