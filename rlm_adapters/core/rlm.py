"""`RLM`: the public entry point, with the seeds' (``rlms``) constructor and methods."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from rlm_adapters.core.budget import Budget, Limits, Resource
from rlm_adapters.core.cleanup import close_shielded
from rlm_adapters.core.console import ConsolePrinter
from rlm_adapters.core.context import describe_context, validate_context
from rlm_adapters.core.events import BudgetEvent, Callback, Event, EventBus, RunFinished
from rlm_adapters.core.lm.base import LMClient
from rlm_adapters.core.lm.limiter import DEFAULT_CEILING
from rlm_adapters.core.lm.registry import backend_names, make_client, owns_client
from rlm_adapters.core.loop import FinalValidator, RunLevel
from rlm_adapters.core.pricing import PricePair, PriceTable
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.sandbox.factory import check_kind
from rlm_adapters.core.sandbox.worker import RESERVED_NAMES
from rlm_adapters.core.trajectory import RLMLogger, RunLog, new_run_id
from rlm_adapters.core.tree import LoopSettings, RunTree, ToolSpec
from rlm_adapters.errors import BudgetExceededError, ConfigurationError

T = TypeVar("T")
ToolInput = Callable[..., Any] | Mapping[str, Any]


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    # Inside a running loop (Jupyter, an async framework calling sync code): use a private thread.
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlm-sync") as pool:
        return pool.submit(context.run, asyncio.run, coroutine).result()


def _positive_int(name: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigurationError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


def _parse_tools(tools: Mapping[str, ToolInput] | None, parameter: str) -> tuple[dict[str, ToolSpec], dict[str, Any]]:
    """Split `custom_tools` into functions (called on the host) and plain values (copied into the REPL)."""
    functions: dict[str, ToolSpec] = {}
    values: dict[str, Any] = {}
    for name, entry in (tools or {}).items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigurationError(f"{parameter}: {name!r} is not a valid Python name")
        if name in RESERVED_NAMES:
            raise ConfigurationError(
                f"{parameter}: {name!r} clashes with the REPL's own function of that name; rename it"
            )
        if isinstance(entry, Mapping) and "tool" in entry:
            fn, description = entry["tool"], str(entry.get("description", ""))
        else:
            fn, description = entry, ""
        if callable(fn):
            functions[name] = ToolSpec(fn, description or (fn.__doc__ or "").strip().split("\n")[0])
        else:
            values[name] = fn
    return functions, values


class RLM:
    """A Recursive Language Model: answers questions about inputs far longer than a context window.

    The input lives as the variable `context` in a sandboxed Python REPL; the root model writes code to
    inspect it and calls sub-models over pieces (`llm_query`, `llm_query_batched`, nested `rlm_query`)
    until it answers with `FINAL(...)` / `FINAL_VAR(...)`.

    Args:
        backend: The root model's backend (``"openai"``, ``"anthropic"``, ``"langchain"``,
            ``"llama_index"``, ``"scripted"``, ...) or a model client instance.
        backend_kwargs: Its settings, e.g. ``{"model_name": "gpt-5-mini", "base_url": ...}``.
        other_backends: Backends of the sub-models (the first is `llm_query`'s default).
        other_backend_kwargs: Their settings, one dict per backend.
        environment: The sandbox kind: ``"subprocess"`` (default), ``"local"``, ``"docker"``, ``"e2b"``.
        environment_kwargs: Sandbox options (``cell_timeout``, ``memory_limit``, ...).
        max_depth: Recursion depth: 0 disables sub-calls, 1 allows `llm_query`, 2 lets `rlm_query`
            start nested RLMs.
        max_iterations: Root turns per run level.
        max_root_tokens: Token cap of the top-level root model (>= 50).
        max_sub_tokens: Token cap of every other call together (>= 50).
        max_cost: Money cap of the whole run tree (None: none).
        timeout: Wall-clock seconds for the whole run (hard: a running cell is interrupted).
        max_concurrency: Hard ceiling on calls in flight per model endpoint. Below it the engine adapts:
            it starts at 64 (or the ceiling, if lower), grows while calls succeed and backs off when
            the endpoint answers 429 / 503 or its rate-limit headers run out.
        max_sub_calls: Cap on the number of sub-calls (None: none).
        logger: Writes a JSONL trajectory per run.
        verbose: Print each iteration to stderr with rich.
        callbacks: Called with every event of every run (sync or async callables).
        custom_tools: Host-side functions (or plain values) put into the top-level REPL:
            ``{"name": fn}`` or ``{"name": {"tool": fn, "description": "..."}}``.
        custom_sub_tools: The same for nested RLMs.
        prices: Extra prices, ``{"model": (usd_per_mtok_in, usd_per_mtok_out)}``.
        raise_on_budget: Raise `BudgetExceededError` (carrying the partial answer) instead of returning.
        max_output_chars: How much of a block's printed output the root model sees.
        instructions: Extra instructions added to the root model's system prompt.
    """

    def __init__(
        self,
        backend: str | LMClient = "openai",
        backend_kwargs: dict[str, Any] | None = None,
        other_backends: Sequence[str | LMClient] | None = None,
        other_backend_kwargs: Sequence[dict[str, Any]] | None = None,
        environment: str = "subprocess",
        environment_kwargs: dict[str, Any] | None = None,
        max_depth: int = 1,
        max_iterations: int = 30,
        max_root_tokens: int = 1_000_000,
        max_sub_tokens: int = 1_000_000,
        max_cost: float | None = None,
        timeout: float | None = None,
        max_concurrency: int = DEFAULT_CEILING,
        max_sub_calls: int | None = None,
        logger: RLMLogger | None = None,
        verbose: bool = False,
        callbacks: Sequence[Callback] | None = None,
        custom_tools: Mapping[str, ToolInput] | None = None,
        custom_sub_tools: Mapping[str, ToolInput] | None = None,
        prices: Mapping[str, PricePair] | None = None,
        raise_on_budget: bool = False,
        max_output_chars: int = 10_000,
        instructions: str | None = None,
    ) -> None:
        self.limits = Limits(max_root_tokens, max_sub_tokens, max_cost, timeout, max_sub_calls)
        self.limits.validate()
        self.max_depth = _positive_int("max_depth", max_depth, 0)
        self.max_iterations = _positive_int("max_iterations", max_iterations, 1)
        self.max_concurrency = _positive_int("max_concurrency", max_concurrency, 1)
        self.max_output_chars = _positive_int("max_output_chars", max_output_chars, 100)
        check_kind(environment)
        self.environment = environment
        self.environment_kwargs = dict(environment_kwargs or {})
        other_backends = list(other_backends or [])
        other_backend_kwargs = (
            [{} for _ in other_backends] if other_backend_kwargs is None else list(other_backend_kwargs)
        )
        if len(other_backend_kwargs) != len(other_backends):
            raise ConfigurationError(
                f"other_backend_kwargs has {len(other_backend_kwargs)} entries for "
                f"{len(other_backends)} other_backends; give one dict per backend"
            )
        for name in [backend, *other_backends]:
            if isinstance(name, str) and name not in backend_names():
                raise ConfigurationError(f"unknown backend {name!r}; use one of {backend_names()}")
        self.backend = backend
        self.backend_kwargs = dict(backend_kwargs or {})
        self.other_backends = other_backends
        self.other_backend_kwargs = [dict(k) for k in other_backend_kwargs]
        # Build the clients once now so that a missing key or model name fails here, not mid-run.
        self.root_model_name = make_client(backend, self.backend_kwargs).model_name
        self.sub_model_names = [
            make_client(b, k).model_name for b, k in zip(other_backends, self.other_backend_kwargs, strict=True)
        ]
        self.logger = logger
        self.verbose = verbose
        self.callbacks = list(callbacks or [])
        self.tools, self.values = _parse_tools(custom_tools, "custom_tools")
        self.sub_tools, _ = _parse_tools(custom_sub_tools, "custom_sub_tools")
        self.prices = dict(prices or {})
        self.raise_on_budget = raise_on_budget
        self.instructions = instructions

    # -- public API -------------------------------------------------------------------------------
    def completion(self, prompt: Any, root_prompt: str | None = None, **kwargs: Any) -> RLMResult:
        """Answer `root_prompt` about `prompt` (the context). Works in sync code and inside a running loop.

        Args:
            prompt: The context: a str, a list of strings or documents, or a dict.
            root_prompt: The question (None when the context itself says what to do).
            **kwargs: As for `acompletion`.
        """
        return run_sync(self.acompletion(prompt, root_prompt, **kwargs))

    async def acompletion(
        self,
        prompt: Any,
        root_prompt: str | None = None,
        *,
        callbacks: Sequence[Callback] | None = None,
        cancel_event: asyncio.Event | None = None,
        instructions: str | None = None,
        final_validator: FinalValidator | None = None,
        run_id: str | None = None,
    ) -> RLMResult:
        """The native async path: run the RLM and return its result.

        Args:
            prompt: The context.
            root_prompt: The question.
            callbacks: Extra event callbacks for this run only.
            cancel_event: When set, the run stops, closes its sandbox and returns ``finish_reason="cancelled"``.
            instructions: Extra instructions for this run's root model.
            final_validator: Checks a final answer; an error string sends it back to the model once.
            run_id: Use this id for the run (and its trajectory) instead of a fresh one.
        """
        context = validate_context(prompt)
        run_id = run_id or new_run_id()
        started = time.perf_counter()
        bus = EventBus([*self.callbacks, *(callbacks or [])])
        if self.verbose:
            bus.subscribe(ConsolePrinter())
        run_log = self._open_log(run_id, context, root_prompt)
        if run_log is not None:
            bus.subscribe(run_log.event)
        tree = await self._build_tree(bus, run_id)
        level = RunLevel(
            tree,
            context,
            root_prompt,
            run_id=run_id,
            instructions=instructions,
            final_validator=final_validator,
        )
        try:
            result = await self._run_cancellable(level, cancel_event, started)
        finally:
            if run_log is not None:
                run_log.close()
            await close_shielded(self._close_tree(tree))
        result.trajectory_file = run_log.path if run_log is not None else None
        result.metadata.update(
            depth_reached=tree.max_depth_reached,
            sub_calls=tree.budget.sub_calls_started,
            root_model=tree.root_client.model_name,
        )
        if self.raise_on_budget and result.finish_reason in ("budget", "timeout"):
            raise BudgetExceededError(f"the run stopped early ({result.finish_reason}): {result.error}", result)
        return result

    async def astream(self, prompt: Any, root_prompt: str | None = None, **kwargs: Any) -> AsyncIterator[Event]:
        """Run and yield every event as it happens; the last one is the top-level `RunFinished`.

        Leaving the loop early cancels the run (its sandbox is closed).
        """
        async for item in self.astream_with_result(prompt, root_prompt, **kwargs):
            if not isinstance(item, RLMResult):
                yield item

    async def astream_with_result(
        self, prompt: Any, root_prompt: str | None = None, **kwargs: Any
    ) -> AsyncIterator[Event | RLMResult]:
        """Like `astream`, then the `RLMResult` as the last item (for adapters that stream progress and
        then need the answer). Takes the keyword arguments of `acompletion`."""
        queue: asyncio.Queue[Event] = asyncio.Queue()
        extra = list(kwargs.pop("callbacks", None) or [])
        task = asyncio.create_task(self.acompletion(prompt, root_prompt, callbacks=[*extra, queue.put], **kwargs))
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                while not queue.empty():
                    yield queue.get_nowait()
                yield task.result()  # re-raises a failure of the run
                return
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # -- internals --------------------------------------------------------------------------------
    async def _run_cancellable(self, level: RunLevel, cancel_event: asyncio.Event | None, started: float) -> RLMResult:
        if cancel_event is None:
            return await level.run()
        task = asyncio.create_task(level.run())
        waiter = asyncio.create_task(cancel_event.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if task.done():
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return RLMResult(
            response=level.progress.partial_answer(),
            finish_reason="cancelled",
            usage_summary=level.tree.budget.usage,
            iterations=level.progress.iterations,
            run_id=level.run_id,
            execution_time=time.perf_counter() - started,
            error="the run was cancelled",
        )

    async def _build_tree(self, bus: EventBus, run_id: str) -> RunTree:
        loop = asyncio.get_running_loop()

        def on_warning(resource: Resource, used: float, limit: float) -> None:
            event = BudgetEvent(
                run_id=run_id,
                resource=resource,
                used=used,
                limit=limit,
                exhausted=False,
                message=f"{resource} at {used:,.4g} of {limit:,.4g}",
            )
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(bus.emit(event)))

        budget = Budget(self.limits, PriceTable(self.prices), on_warning=on_warning)
        root = make_client(self.backend, self.backend_kwargs)
        owned = [root] if owns_client(self.backend) else []
        subs: dict[str, LMClient] = {}
        for backend, kwargs in zip(self.other_backends, self.other_backend_kwargs, strict=True):
            client = make_client(backend, kwargs)
            if owns_client(backend):
                owned.append(client)
            subs.setdefault(client.model_name, client)
        settings = LoopSettings(
            max_depth=self.max_depth,
            max_iterations=self.max_iterations,
            max_output_chars=self.max_output_chars,
            environment=self.environment,
            environment_kwargs=self.environment_kwargs,
            instructions=self.instructions,
        )
        return RunTree(
            settings=settings,
            budget=budget,
            bus=bus,
            root_client=root,
            sub_clients=subs,
            max_concurrency=self.max_concurrency,
            tools=self.tools,
            sub_tools=self.sub_tools,
            values=self.values,
            owned_clients=owned,
        )

    async def _close_tree(self, tree: RunTree) -> None:
        await asyncio.gather(*(client.aclose() for client in tree.owned_clients), return_exceptions=True)
        tree.cleanup()

    def _open_log(self, run_id: str, context: Any, query: str | None) -> RunLog | None:
        if self.logger is None:
            return None
        header = {
            "query": query,
            "context": describe_context(context),
            "config": {
                "root_model": self.root_model_name,
                "sub_models": self.sub_model_names,
                "environment": self.environment,
                "max_depth": self.max_depth,
                "max_iterations": self.max_iterations,
                "limits": {
                    "max_root_tokens": self.limits.max_root_tokens,
                    "max_sub_tokens": self.limits.max_sub_tokens,
                    "max_cost": self.limits.max_cost,
                    "timeout": self.limits.timeout,
                },
            },
        }
        return self.logger.open_run(run_id, header)


__all__ = ["RLM", "RunFinished", "run_sync"]
