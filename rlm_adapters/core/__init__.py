"""The engine's face: what the adapters, the services, the CLI and the package root may use of the core.

Code outside `rlm_adapters.core` imports these names (and the faces of the layers, `rlm_adapters.core.lm`,
`rlm_adapters.core.sandbox`, `rlm_adapters.core.cache`, `rlm_adapters.core.tracing`), never a module of the
core: `tests/test_layers.py` holds it to that. The run machinery behind them is `rlm_adapters.core.engine`.

Each name loads its module on first use (PEP 562), so that importing a layer of the core (which loads this
face first) loads nothing else.
"""

import importlib
import typing  # a module, not names: the face binds no public name outside `__all__`

# Each public name -> the module that defines it (loaded when the name is first used).
_LAZY: dict[str, str] = {
    name: module
    for module, names in {
        "rlm_adapters.core.budget": ("Limits",),
        "rlm_adapters.core.budget_limits": ("limit_amount",),
        "rlm_adapters.core.cleanup": ("close_shielded",),
        "rlm_adapters.core.engine.bridge": (
            "iter_sync",
            "run_sync",
        ),
        "rlm_adapters.core.engine.budget_hook": ("OnBudget",),
        "rlm_adapters.core.engine.continuation": ("Continuation",),
        "rlm_adapters.core.engine.observers": (
            "INTERRUPTED",
            "Observer",
            "RunObserver",
        ),
        "rlm_adapters.core.engine.parsing": ("Conversation",),
        "rlm_adapters.core.engine.prompts": ("truncate_output",),
        "rlm_adapters.core.engine.session_replay": ("SessionTurn",),
        "rlm_adapters.core.engine.tool_calls": (
            "InvalidToolCall",
            "ToolCall",
            "ToolDefinition",
            "offer_tools",
        ),
        "rlm_adapters.core.events": (
            "AnswerDelta",
            "BudgetEvent",
            "Callback",
            "CellExecuted",
            "ConcurrencyCut",
            "Event",
            "FinishReason",
            "RootCall",
            "Route",
            "RunFinished",
            "RunStarted",
            "SubCallFinished",
            "SubCallSent",
            "SubCallStarted",
        ),
        "rlm_adapters.core.handle": ("RunHandle",),
        "rlm_adapters.core.json_schema": ("MAX_SCHEMA_CHARS",),
        "rlm_adapters.core.output": ("OutputSchema",),
        "rlm_adapters.core.pricing": (
            "PriceTable",
            "register_price",
        ),
        "rlm_adapters.core.result": (
            "jsonable",
            "Claim",
            "ClaimBasis",
            "ClaimKind",
            "Place",
            "PlaceKind",
            "RLMResult",
            "Source",
        ),
        "rlm_adapters.core.rlm": ("RLM",),
        "rlm_adapters.core.settings": (
            "CHAT_DIRECT_BELOW_TOKENS",
            "DEFAULTS",
            "OPTIONS",
            "RLMOptions",
            "RLMSettings",
            "flagged",
        ),
        "rlm_adapters.core.tally": ("EventTally",),
        "rlm_adapters.core.tokens": (
            "estimate_tokens",
            "tokens_for_chars",
        ),
        "rlm_adapters.core.trajectory": (
            "SOURCES_RECORD",
            "RLMLogger",
            "append_record",
            "new_run_id",
            "read_trajectory",
        ),
        "rlm_adapters.core.units": (
            "human_bytes",
            "parse_size",
        ),
        "rlm_adapters.core.usage": (
            "ModelUsage",
            "UsageSummary",
        ),
    }.items()
    for name in names
}

if typing.TYPE_CHECKING:
    from rlm_adapters.core.budget import Limits
    from rlm_adapters.core.budget_limits import limit_amount
    from rlm_adapters.core.cleanup import close_shielded
    from rlm_adapters.core.engine.bridge import iter_sync, run_sync
    from rlm_adapters.core.engine.budget_hook import OnBudget
    from rlm_adapters.core.engine.continuation import Continuation
    from rlm_adapters.core.engine.observers import INTERRUPTED, Observer, RunObserver
    from rlm_adapters.core.engine.parsing import Conversation
    from rlm_adapters.core.engine.prompts import truncate_output
    from rlm_adapters.core.engine.session_replay import SessionTurn
    from rlm_adapters.core.engine.tool_calls import InvalidToolCall, ToolCall, ToolDefinition, offer_tools
    from rlm_adapters.core.events import (
        AnswerDelta,
        BudgetEvent,
        Callback,
        CellExecuted,
        ConcurrencyCut,
        Event,
        FinishReason,
        RootCall,
        Route,
        RunFinished,
        RunStarted,
        SubCallFinished,
        SubCallSent,
        SubCallStarted,
    )
    from rlm_adapters.core.handle import RunHandle
    from rlm_adapters.core.json_schema import MAX_SCHEMA_CHARS
    from rlm_adapters.core.output import OutputSchema
    from rlm_adapters.core.pricing import PriceTable, register_price
    from rlm_adapters.core.result import Claim, ClaimBasis, ClaimKind, Place, PlaceKind, RLMResult, Source, jsonable
    from rlm_adapters.core.rlm import RLM
    from rlm_adapters.core.settings import CHAT_DIRECT_BELOW_TOKENS, DEFAULTS, OPTIONS, RLMOptions, RLMSettings, flagged
    from rlm_adapters.core.tally import EventTally
    from rlm_adapters.core.tokens import estimate_tokens, tokens_for_chars
    from rlm_adapters.core.trajectory import SOURCES_RECORD, RLMLogger, append_record, new_run_id, read_trajectory
    from rlm_adapters.core.units import human_bytes, parse_size
    from rlm_adapters.core.usage import ModelUsage, UsageSummary

__all__ = [
    "CHAT_DIRECT_BELOW_TOKENS",
    "DEFAULTS",
    "INTERRUPTED",
    "MAX_SCHEMA_CHARS",
    "OPTIONS",
    "RLM",
    "SOURCES_RECORD",
    "AnswerDelta",
    "BudgetEvent",
    "Callback",
    "CellExecuted",
    "Claim",
    "ClaimBasis",
    "ClaimKind",
    "ConcurrencyCut",
    "Continuation",
    "Conversation",
    "Event",
    "EventTally",
    "FinishReason",
    "InvalidToolCall",
    "Limits",
    "ModelUsage",
    "Observer",
    "OnBudget",
    "OutputSchema",
    "Place",
    "PlaceKind",
    "PriceTable",
    "RLMLogger",
    "RLMOptions",
    "RLMResult",
    "RLMSettings",
    "RootCall",
    "Route",
    "RunFinished",
    "RunHandle",
    "RunObserver",
    "RunStarted",
    "SessionTurn",
    "Source",
    "SubCallFinished",
    "SubCallSent",
    "SubCallStarted",
    "ToolCall",
    "ToolDefinition",
    "UsageSummary",
    "append_record",
    "close_shielded",
    "estimate_tokens",
    "flagged",
    "human_bytes",
    "iter_sync",
    "jsonable",
    "limit_amount",
    "new_run_id",
    "offer_tools",
    "parse_size",
    "read_trajectory",
    "register_price",
    "run_sync",
    "tokens_for_chars",
    "truncate_output",
]


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
