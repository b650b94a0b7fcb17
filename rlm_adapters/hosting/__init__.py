"""What the adapters share to host runs: persistent RLMs kept in a pool, a chat conversation as a run's input.

A service beside the adapters (LangChain, LlamaIndex, MCP, `rlm serve`), standing on the core's face: nothing
in `rlm_adapters.core` imports it.
"""

from rlm_adapters.hosting.conversation import conversation_input
from rlm_adapters.hosting.pool import POOL_DEFAULTS, CloseReason, Lease, PoolLimits, SessionPool

__all__ = ["POOL_DEFAULTS", "CloseReason", "Lease", "PoolLimits", "SessionPool", "conversation_input"]
