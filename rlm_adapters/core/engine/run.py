"""One run of an `RLM`: a `RunRequest` through its run tree, trajectory log and top level to an `RLMResult`."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlm_adapters.core.account import Account
from rlm_adapters.core.cache import CallCache, RunCalls
from rlm_adapters.core.cleanup import close_shielded
from rlm_adapters.core.context import RunContext, validate_context
from rlm_adapters.core.engine.backends import Backends
from rlm_adapters.core.engine.budget import Budget
from rlm_adapters.core.engine.budget_hook import OnBudget, check_hook
from rlm_adapters.core.engine.compat import raise_for_limit
from rlm_adapters.core.engine.continuation import resolve_input
from rlm_adapters.core.engine.direct import DirectRefused, DirectRun, RouteChoice, choose_route, direct_system
from rlm_adapters.core.engine.level_sandbox import OwnSandbox, SandboxLease
from rlm_adapters.core.engine.loop import FinalValidator, RunLevel
from rlm_adapters.core.engine.observers import Observers, RunObserver
from rlm_adapters.core.engine.parsing import context_texts, flatten_messages, quote_check
from rlm_adapters.core.engine.session import Session
from rlm_adapters.core.engine.session_replay import SessionTurn
from rlm_adapters.core.engine.tool_calls import ToolOffer, offer_tools
from rlm_adapters.core.engine.tools import ToolSet
from rlm_adapters.core.engine.tree import RunTree
from rlm_adapters.core.events import Callback, EventBus
from rlm_adapters.core.output import AnswerCheck, OutputSchema, SchemaInput
from rlm_adapters.core.pricing import PriceTable
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.settings import RLMSettings, positive_int
from rlm_adapters.core.tracing import Tracing, tracer_for
from rlm_adapters.core.trajectory import RLMLogger, RunLog, new_run_id
from rlm_adapters.errors import RLMRunFailed

logger = logging.getLogger("rlm_adapters")


@dataclass(frozen=True)
class RunRequest:
    """What one call asks for, beyond the `RLM`'s own settings (`acompletion`'s arguments).

    Attributes:
        prompt: The context, as given.
        query: The question.
        callbacks: Extra event callbacks for this run only.
        cancel_event: Stops the run when set.
        instructions: Extra instructions for this run's root model.
        final_validator: Checks a final answer; an error string sends it back to the model, up to
            ``output_retries`` times.
        run_id: The run's id (None: a fresh one).
        session: The persistent session the run uses (None: a sandbox of its own).
        on_budget: Asked before a limit stops this run (None: the `RLM`'s own hook, if any).
        output_schema: The schema the answer must match (`RLMResult.value` holds the typed answer).
        output_retries: How many invalid final answers go back to the root model before the run fails.
        tools: The caller's tools the root model may end its turn with (`core/engine/tool_calls.py`).
        tool_choice: ``auto`` / None, ``required`` (or ``any``), ``none`` or a tool's name.
        parallel_tool_calls: Allow several calls per turn.
        observers: What watches the run from outside (its sources): told it starts, each event, when the
            answer exists and how it ended (`core.engine.observers`).
        chat: The conversation the context and question were made from (a chat adapter's ``{"role",
            "content"}`` entries): the direct route (``direct_below_tokens``) sends it as chat messages
            instead of the context and question, which say how to read it in a REPL.
        account: Who else pays for the run's model calls (a key of a shared store: `core/account.py`):
            each call is held against it before it is sent and settled when it returns.
        offer: `tools` checked once (set from the three above).
    """

    prompt: Any
    query: str | None = None
    callbacks: tuple[Callback, ...] = ()
    cancel_event: asyncio.Event | None = None
    instructions: str | None = None
    final_validator: FinalValidator | None = None
    run_id: str | None = None
    session: Session | None = None
    on_budget: OnBudget | None = None
    output_schema: OutputSchema | SchemaInput | None = None
    output_retries: int = 1
    tools: Sequence[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    observers: tuple[RunObserver, ...] = ()
    chat: Sequence[Mapping[str, Any]] | None = None
    account: Account | None = None
    offer: ToolOffer | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "callbacks", tuple(self.callbacks or ()))
        object.__setattr__(self, "observers", tuple(self.observers or ()))
        check_hook(self.on_budget)  # every way in (completion, acompletion, start, a session) is checked
        object.__setattr__(self, "offer", offer_tools(self.tools, self.tool_choice, self.parallel_tool_calls))
        # A type or a JSON schema is checked here, before anything starts (a bad one fails the call at once).
        if self.output_schema is not None:
            object.__setattr__(self, "output_schema", OutputSchema.of(self.output_schema))
        positive_int("output_retries", self.output_retries, 0)

    @property
    def schema(self) -> OutputSchema | None:
        """The checked `output_schema`."""
        return self.output_schema if isinstance(self.output_schema, OutputSchema) else None


class Engine(Protocol):
    """What a run takes from its `RLM`, read once when the run starts."""

    settings: RLMSettings
    backends: Backends
    tools: ToolSet
    sub_tools: ToolSet
    logger: RLMLogger | None
    callbacks: list[Callback]
    cache: CallCache | None
    on_budget: OnBudget | None
    tracing: Tracing


async def execute(engine: Engine, request: RunRequest) -> RLMResult:
    """Run `request` with `engine`'s settings, models and tools (one at a time in a persistent session)."""
    if request.session is None:
        return await _execute(engine, request)
    # A close of the session from another thread ends this run as cancelled (its guard's event).
    async with request.session.guard(request.cancel_event) as cancel, request.session.lock():
        return await _execute(engine, dataclasses.replace(request, cancel_event=cancel))


async def _execute(engine: Engine, request: RunRequest) -> RLMResult:
    settings, session = engine.settings, request.session  # the run keeps the settings it starts with
    prompt, query = resolve_input(request.prompt, request.query, session)
    context = validate_context(flatten_messages(prompt), settings.context_preview_chars)
    run_id = request.run_id or new_run_id()
    started = time.perf_counter()
    bus = EventBus([*engine.callbacks, *request.callbacks])
    if settings.verbose:
        from rlm_adapters.core.engine.console import ConsolePrinter  # rich and pygments: loaded only for verbose runs

        bus.subscribe(ConsolePrinter())
    run_log = open_log(engine.logger, run_id, context, query, settings, engine.backends)
    if run_log is not None:
        bus.subscribe(run_log.event)
    watch = Observers(request.observers, settings.sources_timeout)
    watch.start(run_id, bus)
    clients = engine.backends.build()  # on this run's loop: SDK clients bind to the loop they start in
    tracer = tracer_for(engine.tracing, [clients.root, *clients.subs.values()])
    if tracer is not None:
        bus.subscribe(tracer.on_event)
    budget = Budget(
        settings.limits,
        PriceTable(settings.prices),
        on_budget=request.on_budget or engine.on_budget,
        account=request.account,
    )
    tree = RunTree(settings, budget, bus, clients.root, clients.subs, engine.tools, engine.sub_tools, clients.owned)
    if engine.cache is not None:
        tree.calls = RunCalls(engine.cache)
    schema = request.schema
    check = schema.validator(request.final_validator) if schema else None
    choice = choose_route(
        settings,
        context,
        query,
        chat=request.chat,
        system=direct_system([settings.instructions, request.instructions], schema, request.offer)
        if settings.direct_below_tokens is not None
        else None,
        in_session=session is not None,
    )
    lease: SandboxLease | None = None
    try:
        if choice.route == "direct":
            level: RunLevel | DirectRun = DirectRun(
                tree,
                context,
                query,
                choice,
                run_id=run_id,
                check=check,
                offer=request.offer,
                output_retries=request.output_retries,
                is_quoted=quote_check(lambda: context_texts(context.value)),
            )
            try:
                result = await run_cancellable(level, request.cancel_event, started)
            except DirectRefused as refused:
                logger.info("run %s: the direct prompt was refused as too long; the RLM answers it", run_id)
                choice = choice.fell_back(str(refused))
        if choice.route == "rlm":
            lease = (
                OwnSandbox(tree, run_id)
                if session is None
                else session.lease(settings, SessionTurn(request.prompt, request.query, request.instructions))
            )
            level = _rlm_level(tree, context, query, request, run_id, check, lease, choice)
            result = await run_cancellable(level, request.cancel_event, started)
    except BaseException as exc:
        watch.fail(exc)
        raise
    finally:
        if run_log is not None:
            run_log.close()
        if tracer is not None:
            tracer.close()
        await close_shielded(tree.aclose())
        if request.account is not None:  # every call's spend is recorded before the result exists
            await close_shielded(request.account.flush())
    describe(result, request, tree, run_log)
    result.metadata.update(choice.metadata())
    if lease is not None:
        lease.describe(result.metadata)
    if check is not None and result.finish_reason == "final" and level.progress.final is not None:
        result.value = check.value_of(level.progress.final)
    await watch.finish(result)  # the answer first (`answered`), then what they found, within sources_timeout
    raise_for_limit(result, settings)
    if settings.raise_on_error and result.failed:
        raise RLMRunFailed(result)  # an empty answer must not pass for one (issue 51)
    return result


def open_log(
    logger: RLMLogger | None,
    run_id: str,
    context: RunContext,
    query: str | None,
    settings: RLMSettings,
    models: Backends,
) -> RunLog | None:
    """The run's trajectory log with its header (None without a logger)."""
    if logger is None:
        return None
    config = {
        "root_model": models.root_model_name,
        "sub_models": models.sub_model_names,
        "environment": settings.environment,
        "max_depth": settings.max_depth,
        "max_iterations": settings.max_iterations,
        "limits": dataclasses.asdict(settings.limits),
    }
    return logger.open_run(run_id, {"query": query, "context": context.description, "config": config})


def _rlm_level(
    tree: RunTree,
    context: RunContext,
    query: str | None,
    request: RunRequest,
    run_id: str,
    check: AnswerCheck | None,
    lease: SandboxLease,
    choice: RouteChoice,
) -> RunLevel:
    """The top level of the RLM route."""
    schema = request.schema
    return RunLevel(
        tree,
        context,
        query,
        run_id=run_id,
        instructions="\n\n".join(filter(None, [request.instructions, schema.instructions() if schema else None]))
        or None,
        final_validator=check or request.final_validator,
        lease=lease,
        validation_retries=request.output_retries,
        tool_offer=request.offer,
        route_reason=choice.reason,
    )


async def run_cancellable(level: RunLevel | DirectRun, cancel_event: asyncio.Event | None, started: float) -> RLMResult:
    """Run the top level; when `cancel_event` is set first, stop it and return a ``cancelled`` result."""
    if cancel_event is None:
        return await level.run()
    if cancel_event.is_set():  # cancelled before it began (its session closed while it waited): no call made
        return _cancelled(level, started)
    task = asyncio.create_task(level.run())
    waiter = asyncio.create_task(cancel_event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()  # `wait` leaves its tasks running: the run must not outlive its caller
        await asyncio.gather(task, return_exceptions=True)
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return _cancelled(level, started)


def _cancelled(level: RunLevel | DirectRun, started: float) -> RLMResult:
    return RLMResult(
        response=level.progress.partial_answer(),
        finish_reason="cancelled",
        usage_summary=level.tree.budget.usage,
        iterations=level.progress.iterations,
        run_id=level.run_id,
        execution_time=time.perf_counter() - started,
        error="the run was cancelled",
    )


def describe(result: RLMResult, request: RunRequest, tree: RunTree, run_log: RunLog | None) -> None:
    """Fill in what the loop cannot know: the trajectory, the root model, the prompt."""
    result.trajectory_file = run_log.path if run_log is not None else None
    result.root_model = tree.root_client.model_name
    result.prompt = request.prompt
    result.metadata.update(
        depth_reached=tree.max_depth_reached,
        sub_calls=tree.budget.sub_calls_started,
        root_model=tree.root_client.model_name,
    )
    if tree.calls is not None:
        result.metadata["replayed_cost"] = round(tree.budget.replayed_cost, 8)
        if tree.budget.replayed_unpriced:
            result.metadata["replayed_unpriced"] = tree.budget.replayed_unpriced
        resumed = result.resumed()
        if resumed is not None:
            logger.info("run %s %s", result.run_id, resumed)
    if tree.budget.asker is not None and tree.budget.asker.raised:
        result.metadata["limits_raised"] = [raised.to_dict() for raised in tree.budget.asker.raised]
    if run_log is not None and run_log.records is not None:
        result.metadata["trajectory"] = run_log.trajectory()
