"""The one event stream of a run.

The loop and the broker emit these typed events; callbacks, `RLM.astream`, LangChain streaming and the
trajectory log consume this one stream, and MCP progress, the CLI's progress line and the console count it
with one `core/tally.py:EventTally`.
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

from rlm_adapters.core.record_base import Record

logger = logging.getLogger("rlm_adapters")

EventKind = Literal[
    "run_start",
    "root_call",
    "cell",
    "sub_call_start",
    "sub_call_sent",
    "sub_call_end",
    "budget",
    "concurrency",
    "answer_delta",
    "final",
]
FinishReason = Literal["final", "tool_calls", "max_iterations", "budget", "timeout", "error", "cancelled"]
SubCallKind = Literal["llm_query", "rlm_query", "tool"]
# How a run answers: one plain call to the root model (``direct``), or the RLM loop (``rlm``).
Route = Literal["direct", "rlm"]
# Why a model call ended before its reply was whole (it is still counted, as far as it got).
CutReason = Literal["timeout", "budget", "cancelled", "error"]
CUT_REASONS: tuple[CutReason, ...] = ("timeout", "budget", "cancelled", "error")

# The fields that carry unbounded texts (what a model wrote, what code printed), shortened by `to_dict`.
TEXT_FIELDS = ("prompt", "response", "output", "code", "reply", "error")
MESSAGE_CHARS_FACTOR = 4  # the messages a root call sent are its substance: they keep more


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [+{len(text) - limit:,} chars]"


@dataclass(kw_only=True, eq=False, repr=False)  # `Record`'s eq and repr: compiled once, not per class
class Event(Record):
    """Fields every event has: which run (and depth) it belongs to, and when it happened."""

    kind: EventKind = field(init=False)
    run_id: str
    depth: int = 0
    parent_run_id: str | None = None
    time: float = field(default_factory=time.time)

    def to_dict(self, max_chars: int | None = None) -> dict[str, Any]:
        """A JSON-ready dict of the event, its long texts shortened for outside consumers.

        Args:
            max_chars: Cut each text field (``prompt``, ``response``, ``output``, ``code``, ``reply``,
                ``error``) to this many characters, and each message a root call sent to four times as
                many, saying how much was cut. None keeps the full texts.
        """
        data = asdict(self)
        if max_chars is None:
            return data
        for name in TEXT_FIELDS:
            value = data.get(name)
            if isinstance(value, str):
                data[name] = cut(value, max_chars)
        for message in data.get("messages_sent") or []:
            message["content"] = cut(message["content"], max_chars * MESSAGE_CHARS_FACTOR)
        return data


@dataclass(kw_only=True, eq=False, repr=False)
class RunStarted(Event):
    """A (possibly nested) RLM run began; a nested run started by ``rlm_query_batched`` names its batch.

    `route` is ``direct`` for a prompt under ``direct_below_tokens`` (one plain call: `sandbox` and
    `isolation` are ``none``), else ``rlm``; `route_reason` says why (the prompt's tokens against the
    threshold). A direct call the model refuses as too long is followed by a second `RunStarted` of the same
    run, ``rlm`` this time, whose reason says it fell back.
    """

    query: str | None
    context_description: dict[str, Any]
    root_model: str
    sub_models: list[str]
    sandbox: str
    isolation: str
    max_iterations: int
    max_depth: int
    batch_id: str | None = None
    batch_size: int = 1
    route: Route = "rlm"
    route_reason: str | None = None

    def __post_init__(self) -> None:
        self.kind = "run_start"

    @property
    def isolation_level(self) -> str:
        """The sandbox's level in a few words (``bwrap (bundled) + landlock 7 + seccomp``): `isolation` up to its
        first ``;``, without the limits that follow, for a one-line header."""
        return self.isolation.split(";", 1)[0].strip()


@dataclass(kw_only=True, eq=False, repr=False)
class RootCall(Event):
    """The root model answered one turn. `messages_sent` are only the messages new since last turn.

    `input_tokens` include what the provider's prompt cache served (`cache_read_tokens`) or stored
    (`cache_write_tokens`). `cached`: the reply was replayed from the engine's call cache (no request, no cost).
    `truncated`: the reply was cut at its token cap (``max_reply_tokens``). `cut`: the call ended before its
    reply was whole (``"timeout"``, ``"budget"``, ``"cancelled"``, ``"error"``); `reply` and the tokens are then
    what had arrived (`CUT_REASONS`).
    """

    iteration: int
    messages_sent: list[dict[str, str]]
    reply: str
    model: str
    input_tokens: int
    output_tokens: int
    cost: float
    duration: float
    cached: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    truncated: bool = False
    cut: CutReason | None = None

    def __post_init__(self) -> None:
        self.kind = "root_call"


@dataclass(kw_only=True, eq=False, repr=False)
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


@dataclass(kw_only=True, eq=False, repr=False)
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


@dataclass(kw_only=True, eq=False, repr=False)
class SubCallSent(Event):
    """A sub-call's request really went to its model: the endpoint's limit and the budget let it out.

    Emitted once per call, between its `SubCallStarted` and `SubCallFinished`; a call the budget refused
    (or that was cancelled while it waited) never has one, so its prompt reached no model. Its prompt is
    the one of the `SubCallStarted` with the same ``call_id``.
    """

    call_id: str
    batch_id: str | None
    call_kind: SubCallKind
    model: str

    def __post_init__(self) -> None:
        self.kind = "sub_call_sent"


@dataclass(kw_only=True, eq=False, repr=False)
class SubCallFinished(Event):
    """A sub-call came back (or failed); `cached`: its reply was replayed from the call cache; `truncated`: its
    reply was cut at its token cap; `cut`: it ended before its reply was whole, counted as far as it got."""

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
    cached: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    truncated: bool = False
    cut: CutReason | None = None

    def __post_init__(self) -> None:
        self.kind = "sub_call_end"


@dataclass(kw_only=True, eq=False, repr=False)
class ConcurrencyCut(Event):
    """An endpoint said it is overloaded and the calls allowed in flight to it came down.

    Emitted by the call that met the overload (HTTP 429 / 503, a ``Retry-After``, an exhausted
    ``x-ratelimit-remaining-*`` header), at most once per round trip (`core/lm/limiter.py`); the call itself
    is retried, so nothing is lost. The limit grows back while calls succeed, with no event. Seen in the
    log (kind ``concurrency``), with ``verbose=True`` and by any callback; many of them in one run mean
    the provider's rate limit, not `max_concurrency`, sets the pace.

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


@dataclass(kw_only=True, eq=False, repr=False)
class BudgetEvent(Event):
    """A budget crossed its warning threshold (`exhausted=False`) or ran out (`exhausted=True`)."""

    resource: str
    used: float
    limit: float | None
    exhausted: bool
    message: str

    def __post_init__(self) -> None:
        self.kind = "budget"


@dataclass(kw_only=True, eq=False, repr=False)
class AnswerDelta(Event):
    """A piece of the answer as the model writes it: on the direct route, each streamed piece of the root
    model's reply, in order (a client that does not stream, or a reply replayed from the call cache, gives the
    whole reply as one piece). The pieces joined are the reply; the `RunFinished` that follows holds the
    answer. Not written to the trajectory log: its `RootCall` holds the whole reply."""

    text: str

    def __post_init__(self) -> None:
        self.kind = "answer_delta"


@dataclass(kw_only=True, eq=False, repr=False)
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
        self._held: dict[str, list[Event]] = {}  # run id -> its events waiting for the run's start event

    def subscribe(self, callback: Callback) -> None:
        """Add a sync or async callable called with every event."""
        self._subscribers.append(callback)

    def hold(self, run_id: str) -> None:
        """Keep the events of run `run_id` back until `release`: its first root call may answer before its
        sandbox opened, and subscribers see a run's start (with the sandbox's kind and isolation) first."""
        self._held.setdefault(run_id, [])

    async def release(self, run_id: str, first: Event) -> None:
        """Deliver `first` (the run's start), then the events held for `run_id` in order, then stop holding."""
        held = self._held.get(run_id, [])
        await self._deliver(first)
        while held:  # what is emitted meanwhile joins the queue, behind what came before it
            await self._deliver(held.pop(0))
        self._held.pop(run_id, None)

    def drop(self, run_id: str) -> None:
        """Forget the events held for `run_id` (it never started) and stop holding."""
        self._held.pop(run_id, None)

    async def emit(self, event: Event) -> None:
        """Deliver `event` to every subscriber (async ones are awaited); a held run's events wait in order."""
        held = self._held.get(event.run_id) if self._held else None
        if held is not None:
            held.append(event)
            return
        await self._deliver(event)

    async def _deliver(self, event: Event) -> None:
        for callback in list(self._subscribers):
            try:
                outcome = callback(event)
                if inspect.isawaitable(outcome):
                    await outcome
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("an event callback failed on a %s event; the run goes on", event.kind)
