"""The engine's face: what a user of the engine handles (`RLM`, its results, events, limits, hooks and types).

The helpers the adapters, the services and the CLI share are the second face, `rlm_adapters.core.adapter_kit`.
Code outside `rlm_adapters.core` imports these names (and the kit's, and the faces of the layers,
`rlm_adapters.core.lm`, `rlm_adapters.core.sandbox`, `rlm_adapters.core.cache`, `rlm_adapters.core.tracing`), never
a module of the core: `tests/test_layers.py` holds it to that. The run machinery behind them is
`rlm_adapters.core.engine`.

Each name loads its module on first use (PEP 562), so that importing a layer of the core (which loads this
face first) loads nothing else.
"""

import typing  # a module, not names: the face binds no public name outside `__all__`

from rlm_adapters._lazy import LazyNames as _LazyNames

# Each public name -> the module that defines it (loaded when the name is first used).
_LAZY: dict[str, str | tuple[str, str]] = {
    name: module
    for module, names in {
        "rlm_adapters.core.budget_limits": ("Limits",),
        "rlm_adapters.core.account": ("Account", "AccountRefused"),
        "rlm_adapters.core.engine.budget_hook": ("OnBudget",),
        "rlm_adapters.core.engine.continuation": ("Continuation",),
        "rlm_adapters.core.engine.observers": (
            "Observer",
            "RunObserver",
        ),
        "rlm_adapters.core.engine.session_replay": ("SessionTurn",),
        "rlm_adapters.core.engine.tool_calls": (
            "InvalidToolCall",
            "ToolCall",
            "ToolDefinition",
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
        "rlm_adapters.core.engine.handle": ("RunHandle",),
        "rlm_adapters.core.output": ("OutputSchema",),
        "rlm_adapters.core.pricing": (
            "PriceTable",
            "register_price",
        ),
        "rlm_adapters.core.result": (
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
            "RLMOptions",
            "RLMSettings",
        ),
        "rlm_adapters.core.trajectory": (
            "RLMLogger",
            "read_trajectory",
        ),
        "rlm_adapters.core.usage": (
            "ModelUsage",
            "UsageSummary",
        ),
    }.items()
    for name in names
}

if typing.TYPE_CHECKING:
    from rlm_adapters.core.account import Account, AccountRefused
    from rlm_adapters.core.budget_limits import Limits
    from rlm_adapters.core.engine.budget_hook import OnBudget
    from rlm_adapters.core.engine.continuation import Continuation
    from rlm_adapters.core.engine.handle import RunHandle
    from rlm_adapters.core.engine.observers import Observer, RunObserver
    from rlm_adapters.core.engine.session_replay import SessionTurn
    from rlm_adapters.core.engine.tool_calls import InvalidToolCall, ToolCall, ToolDefinition
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
    from rlm_adapters.core.output import OutputSchema
    from rlm_adapters.core.pricing import PriceTable, register_price
    from rlm_adapters.core.result import Claim, ClaimBasis, ClaimKind, Place, PlaceKind, RLMResult, Source
    from rlm_adapters.core.rlm import RLM
    from rlm_adapters.core.settings import RLMOptions, RLMSettings
    from rlm_adapters.core.trajectory import RLMLogger, read_trajectory
    from rlm_adapters.core.usage import ModelUsage, UsageSummary

__all__ = [
    "RLM",
    "Account",
    "AccountRefused",
    "AnswerDelta",
    "BudgetEvent",
    "Callback",
    "CellExecuted",
    "Claim",
    "ClaimBasis",
    "ClaimKind",
    "ConcurrencyCut",
    "Continuation",
    "Event",
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
    "read_trajectory",
    "register_price",
]

_NAMES = _LazyNames(__name__, _LAZY, keep=True)
__getattr__ = _NAMES.load
__dir__ = _NAMES.listing
