"""rlm-adapters: Recursive Language Models for LangChain, LlamaIndex and MCP clients.

The engine (`RLM`) and its parts are importable from here with no optional dependency installed; the
adapters live in `rlm_adapters.langchain`, `rlm_adapters.llama_index` and `rlm_adapters.mcp_server`.
"""

from rlm_adapters.core.budget import Limits
from rlm_adapters.core.cache import CachedReply, CallCache, SQLiteCallCache
from rlm_adapters.core.continuation import Continuation
from rlm_adapters.core.events import (
    BudgetEvent,
    CellExecuted,
    ConcurrencyCut,
    Event,
    FinishReason,
    RootCall,
    RunFinished,
    RunStarted,
    SubCallFinished,
    SubCallSent,
    SubCallStarted,
)
from rlm_adapters.core.handle import RunHandle
from rlm_adapters.core.lm import LMClient, LMResponse, Message, ScriptedModel, register_backend
from rlm_adapters.core.pricing import register_price
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.rlm import RLM
from rlm_adapters.core.session_replay import SessionTurn
from rlm_adapters.core.tool_calls import InvalidToolCall, ToolCall, ToolDefinition
from rlm_adapters.core.trajectory import RLMLogger, read_trajectory
from rlm_adapters.core.usage import ModelUsage, UsageSummary
from rlm_adapters.errors import (
    BudgetExceededError,
    CacheError,
    CancellationError,
    ConfigurationError,
    ContextError,
    ErrorThresholdExceededError,
    MissingExtraError,
    ModelError,
    RLMError,
    SandboxError,
    TimeoutExceededError,
    TokenLimitExceededError,
)

__version__ = "0.1.0"

__all__ = [
    "RLM",
    "BudgetEvent",
    "BudgetExceededError",
    "CacheError",
    "CachedReply",
    "CallCache",
    "CancellationError",
    "CellExecuted",
    "ConcurrencyCut",
    "ConfigurationError",
    "ContextError",
    "Continuation",
    "ErrorThresholdExceededError",
    "Event",
    "FinishReason",
    "InvalidToolCall",
    "LMClient",
    "LMResponse",
    "Limits",
    "Message",
    "MissingExtraError",
    "ModelError",
    "ModelUsage",
    "RLMError",
    "RLMLogger",
    "RLMResult",
    "RootCall",
    "RunFinished",
    "RunHandle",
    "RunStarted",
    "SQLiteCallCache",
    "SandboxError",
    "ScriptedModel",
    "SessionTurn",
    "SubCallFinished",
    "SubCallSent",
    "SubCallStarted",
    "TimeoutExceededError",
    "TokenLimitExceededError",
    "ToolCall",
    "ToolDefinition",
    "UsageSummary",
    "__version__",
    "read_trajectory",
    "register_backend",
    "register_price",
]
