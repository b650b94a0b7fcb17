"""The one event stream of a run.

The loop, the broker and the sandbox emit these typed events; callbacks, `RLM.astream`, LangChain
streaming, MCP progress, the CLI's progress line and the trajectory log all consume this one stream.
Events carry full texts (prompts, replies, outputs) in memory; consumers that persist them (the log)
decide how much to keep.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

logger = logging.getLogger("rlm_adapters")

EventKind = Literal[
    "run_start", "root_call", "cell", "sub_call_start", "sub_call_end", "budget", "concurrency", "final"
]
FinishReason = Literal["final", "max_iterations", "budget", "timeout", "error", "cancelled"]
SubCallKind = Literal["llm_query", "rlm_query", "tool"]


@dataclass(kw_only=True)
class Event:
    """Fields every event has: which run (and depth) it belongs to, and when it happened."""

    kind: EventKind = field(init=False)
    run_id: str
    depth: int = 0
    parent_run_id: str | None = None
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the event."""
        data = asdict(self)
        return data


@dataclass(kw_only=True)
class RunStarted(Event):
    """A (possibly nested) RLM run began."""

    query: str | None
    context_description: dict[str, Any]
    root_model: str
    sub_models: list[str]
    sandbox: str
    isolation: str
    max_iterations: int
    max_depth: int

    def __post_init__(self) -> None:
        self.kind = "run_start"


@dataclass(kw_only=True)
class RootCall(Event):
    """The root model answered one turn. `messages_sent` are only the messages new since last turn."""

    iteration: int
    messages_sent: list[dict[str, str]]
    reply: str
    model: str
    input_tokens: int
    output_tokens: int
    cost: float
    duration: float

    def __post_init__(self) -> None:
        self.kind = "root_call"


@dataclass(kw_only=True)
class CellExecuted(Event):
    """One code block ran in the REPL."""

    iteration: int
    index: int
    code: str
    output: str
    error: str | None
    duration: float
    timed_out: bool = False
    variables_lost: bool = False
    final: bool = False

    def __post_init__(self) -> None:
        self.kind = "cell"


@dataclass(kw_only=True)
class SubCallStarted(Event):
    """A sub-call left the REPL: `llm_query`, a nested `rlm_query`, or a custom tool."""

    call_id: str
    batch_id: str | None
    batch_size: int
    call_kind: SubCallKind
    model: str
    prompt: str

    def __post_init__(self) -> None:
        self.kind = "sub_call_start"


@dataclass(kw_only=True)
class SubCallFinished(Event):
    """A sub-call came back (or failed)."""

    call_id: str
    batch_id: str | None
    call_kind: SubCallKind
    model: str
    response: str
    error: str | None
    input_tokens: int
    output_tokens: int
    cost: float
    duration: float

    def __post_init__(self) -> None:
        self.kind = "sub_call_end"


@dataclass(kw_only=True)
class ConcurrencyCut(Event):
    """An endpoint said it is overloaded and the calls allowed in flight to it came down.

    Attributes:
        endpoint: The endpoint (its base URL, or ``model:NAME`` for clients that name none).
        limit: Calls allowed in flight from now on.
        ceiling: The user's ``max_concurrency``.
    """

    endpoint: str
    limit: int
    ceiling: int

    def __post_init__(self) -> None:
        self.kind = "concurrency"


@dataclass(kw_only=True)
class BudgetEvent(Event):
    """A budget crossed its warning threshold (`exhausted=False`) or ran out (`exhausted=True`)."""

    resource: str
    used: float
    limit: float | None
    exhausted: bool
    message: str

    def __post_init__(self) -> None:
        self.kind = "budget"


@dataclass(kw_only=True)
class RunFinished(Event):
    """A run ended. The last event of every run, nested ones included."""

    response: str
    finish_reason: FinishReason
    iterations: int
    usage: dict[str, Any]
    duration: float
    error: str | None = None

    def __post_init__(self) -> None:
        self.kind = "final"


Callback = Callable[[Event], None] | Callable[[Event], Awaitable[None]]


class EventBus:
    """Delivers events to subscribers in order; a failing subscriber is logged, never fatal."""

    def __init__(self, callbacks: list[Callback] | None = None) -> None:
        self._subscribers: list[Callback] = list(callbacks or [])

    def subscribe(self, callback: Callback) -> None:
        """Add a sync or async callable called with every event."""
        self._subscribers.append(callback)

    async def emit(self, event: Event) -> None:
        """Deliver `event` to every subscriber (async ones are awaited)."""
        for callback in list(self._subscribers):
            try:
                outcome = callback(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("an event callback failed on a %s event; the run goes on", event.kind)
