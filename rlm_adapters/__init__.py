"""rlm-adapters: Recursive Language Models for LangChain, LlamaIndex and MCP clients.

The engine (`RLM`) and its parts are importable from here with no optional dependency installed; the
adapters live in `rlm_adapters.langchain`, `rlm_adapters.llama_index` and `rlm_adapters.mcp_server`.

Only the errors are imported with the package; every other name loads its module on first use (PEP 562),
so that ``import rlm_adapters`` and what stands on it (``rlm --help``, ``rlm-mcp``) start at once.
``tests/test_import_contract.py`` keeps the engine, the SDKs and the sandbox launcher out of that import.
"""

import typing  # a module, not names: the package binds no public name outside `__all__`

from rlm_adapters._lazy import LazyNames as _LazyNames
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
    RLMRunFailed,
    SandboxError,
    StoreError,
    TimeoutExceededError,
    TokenLimitExceededError,
)

__version__ = "0.1.0"

# Each public name but the errors -> the module that defines it (loaded when the name is first used).
_LAZY: dict[str, str | tuple[str, str]] = {
    name: module
    for module, names in {
        "rlm_adapters.core": (
            "RLM",
            "AnswerDelta",
            "BudgetEvent",
            "CellExecuted",
            "ConcurrencyCut",
            "Continuation",
            "Event",
            "FinishReason",
            "InvalidToolCall",
            "Limits",
            "ModelUsage",
            "RLMLogger",
            "RLMResult",
            "RootCall",
            "RunFinished",
            "RunHandle",
            "RunStarted",
            "SessionTurn",
            "StoreError",
            "SubCallFinished",
            "SubCallSent",
            "SubCallStarted",
            "ToolCall",
            "ToolDefinition",
            "UsageSummary",
            "read_trajectory",
            "register_price",
        ),
        "rlm_adapters.core.cache": ("CachedReply", "CallCache", "SQLiteCallCache"),
        "rlm_adapters.core.lm": ("LMClient", "LMResponse", "Message", "ScriptedModel", "register_backend"),
    }.items()
    for name in names
}

if typing.TYPE_CHECKING:
    from rlm_adapters.core import (
        RLM,
        AnswerDelta,
        BudgetEvent,
        CellExecuted,
        ConcurrencyCut,
        Continuation,
        Event,
        FinishReason,
        InvalidToolCall,
        Limits,
        ModelUsage,
        RLMLogger,
        RLMResult,
        RootCall,
        RunFinished,
        RunHandle,
        RunStarted,
        SessionTurn,
        SubCallFinished,
        SubCallSent,
        SubCallStarted,
        ToolCall,
        ToolDefinition,
        UsageSummary,
        read_trajectory,
        register_price,
    )
    from rlm_adapters.core.cache import CachedReply, CallCache, SQLiteCallCache
    from rlm_adapters.core.lm import LMClient, LMResponse, Message, ScriptedModel, register_backend


__all__ = [
    "RLM",
    "AnswerDelta",
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
    "RLMRunFailed",
    "RootCall",
    "RunFinished",
    "RunHandle",
    "RunStarted",
    "SQLiteCallCache",
    "SandboxError",
    "ScriptedModel",
    "SessionTurn",
    "StoreError",
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

_NAMES = _LazyNames(__name__, _LAZY, keep=True)
__getattr__ = _NAMES.load
__dir__ = _NAMES.listing
