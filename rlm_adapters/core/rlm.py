"""`RLM`: the public entry point, with the seeds' (``rlms``) constructor and methods."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any

from rlm_adapters.core.bridge import run_sync
from rlm_adapters.core.budget import Budget, Limits
from rlm_adapters.core.cleanup import close_shielded
from rlm_adapters.core.console import ConsolePrinter
from rlm_adapters.core.context import RunContext, validate_context
from rlm_adapters.core.events import Callback, Event, EventBus
from rlm_adapters.core.handle import RunHandle
from rlm_adapters.core.lm import DEFAULT_CEILING, LMClient, backend_names, make_client, owns_client
from rlm_adapters.core.loop import FinalValidator, RunLevel
from rlm_adapters.core.options import ToolInput, alias, apply_sampling, parse_tools, positive_int
from rlm_adapters.core.parsing import CodeFences, flatten_messages
from rlm_adapters.core.pricing import PricePair, PriceTable
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.sandbox import check_kind
from rlm_adapters.core.session import ContextAlias, Session, check_session_options
from rlm_adapters.core.trajectory import RLMLogger, RunLog, new_run_id
from rlm_adapters.core.tree import FinalProtocol, LoopSettings, RunTree
from rlm_adapters.errors import ConfigurationError, raise_reference_error


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
        environment: The sandbox kind: ``"subprocess"`` (default), ``"local"`` (trusted code only),
            ``"docker"``, or a cloud sandbox: ``"e2b"``, ``"modal"``, ``"prime"``, ``"daytona"``.
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
        max_sub_calls: Cap on the calls made from the REPL at every depth: each prompt of
            `llm_query` / `llm_query_batched` and each nested run of `rlm_query*` counts one (None: none).
        max_sandboxes: Sandboxes that may run at once in one run tree (the top-level run's included);
            nested runs past it wait for a free one.
        logger: Writes a JSONL trajectory per run.
        verbose: Print each iteration to stderr with rich.
        callbacks: Called with every event of every run (sync or async callables).
        custom_tools: Host-side functions (or plain values) put into the top-level REPL:
            ``{"name": fn}`` or ``{"name": {"tool": fn, "description": "..."}}``.
        custom_sub_tools: The same for nested RLMs.
        prices: Extra prices, ``{"model": (usd_per_mtok_in, usd_per_mtok_out)}``.
        raise_on_budget: Raise instead of returning when a limit ends the run, as the reference RLM does:
            `TimeoutExceededError`, `TokenLimitExceededError`, `ErrorThresholdExceededError`,
            `CancellationError` or `BudgetExceededError`, each carrying the partial answer and the result.
        max_output_chars: How much of a block's printed output the root model sees.
        instructions: Extra instructions added to the root model's system prompt.
        persistent: Keep one sandbox across `completion` calls: each call's context becomes ``context_1``,
            ``context_2``, ... and each finished conversation ``history_0``, ... . Close it with `close()`,
            ``with RLM(...) as rlm:`` or ``async with``.
        session_idle_timeout: A persistent sandbox unused this many seconds is closed (the next call starts
            a fresh one).
        session_max_lifetime: A persistent sandbox is closed this many seconds after it started.
        context_alias: In a persistent session, ``context`` / ``history`` name the ``"latest"`` one (ours)
            or the ``"first"`` (the reference's).
        final_protocol: What the system prompt teaches for finishing: ``"FINAL"`` (FINAL / FINAL_VAR) or
            ``"answer"`` (the reference's ``answer["content"] = ...; answer["ready"] = True``). Both are
            always accepted.
        custom_system_prompt: Replaces the whole system prompt (``{custom_tools_section}`` is filled in).
        max_errors: End the run after this many turns in a row with a cell error.
        max_tokens: End the run once all its calls together used more tokens (checked after each turn).
        compaction: Summarise the root's older turns when its history nears its context window.
        compaction_threshold_pct: The fraction of the window at which to compact.
        context_window: The root model's window in tokens, for compaction.
        max_concurrent_subcalls: Nested RLMs (``rlm_query_batched``) running at once (None: no bound
            beyond `max_concurrency`).
        sampling_args: Request options of the root model (``temperature``, ``top_p``, ``seed``, ...).
        sub_sampling_args: The same for `llm_query`'s default model (without `other_backends`, the root
            backend is mirrored as the sub-model with these options, as in the reference).
        max_timeout: The reference's name for `timeout`.
        max_budget: The reference's name for `max_cost`.
        code_fences: Which fenced blocks run: ``"any"`` (```repl, ```python, bare) or ``"repl"`` (only
            ```repl, as the reference).
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
        max_sandboxes: int = 32,
        logger: RLMLogger | None = None,
        verbose: bool = False,
        callbacks: Sequence[Callback] | None = None,
        custom_tools: Mapping[str, ToolInput] | None = None,
        custom_sub_tools: Mapping[str, ToolInput] | None = None,
        prices: Mapping[str, PricePair] | None = None,
        raise_on_budget: bool = False,
        max_output_chars: int = 10_000,
        instructions: str | None = None,
        *,
        persistent: bool = False,
        session_idle_timeout: float | None = None,
        session_max_lifetime: float | None = None,
        context_alias: ContextAlias = "latest",
        final_protocol: FinalProtocol = "FINAL",
        custom_system_prompt: str | None = None,
        max_errors: int | None = None,
        max_tokens: int | None = None,
        compaction: bool = False,
        compaction_threshold_pct: float = 0.85,
        context_window: int = 128_000,
        max_concurrent_subcalls: int | None = None,
        sampling_args: Mapping[str, Any] | None = None,
        sub_sampling_args: Mapping[str, Any] | None = None,
        max_timeout: float | None = None,
        max_budget: float | None = None,
        code_fences: CodeFences = "any",
    ) -> None:
        timeout = alias("timeout", timeout, "max_timeout", max_timeout)
        max_cost = alias("max_cost", max_cost, "max_budget", max_budget)
        if environment == "ipython":
            # The reference's IPython REPL: a persistent namespace with notebook-style echo of the last
            # expression. Our subprocess worker is exactly that, behind the default walls.
            environment = "subprocess"
        backend_kwargs, other_backends, other_backend_kwargs = apply_sampling(
            backend, backend_kwargs, other_backends, other_backend_kwargs, sampling_args, sub_sampling_args
        )
        self.limits = Limits(max_root_tokens, max_sub_tokens, max_cost, timeout, max_sub_calls)
        self.limits.validate()
        self.max_depth = positive_int("max_depth", max_depth, 0)
        self.max_iterations = positive_int("max_iterations", max_iterations, 1)
        self.max_concurrency = positive_int("max_concurrency", max_concurrency, 1)
        self.max_output_chars = positive_int("max_output_chars", max_output_chars, 100)
        self.max_sandboxes = positive_int("max_sandboxes", max_sandboxes, 1)
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
        self.tools, self.values, self.value_notes = parse_tools(custom_tools, "custom_tools")
        # As in the reference: custom_sub_tools=None gives nested runs the same tools; {} gives them none.
        sub_source = custom_tools if custom_sub_tools is None else custom_sub_tools
        self.sub_tools, self.sub_values, self.sub_value_notes = parse_tools(sub_source, "custom_sub_tools")
        self.prices = dict(prices or {})
        self.raise_on_budget = raise_on_budget
        self.instructions = instructions
        if final_protocol not in ("FINAL", "answer"):
            raise ConfigurationError(f"final_protocol={final_protocol!r} must be 'FINAL' or 'answer'")
        self.final_protocol: FinalProtocol = final_protocol
        if code_fences not in ("any", "repl"):
            raise ConfigurationError(f"code_fences={code_fences!r} must be 'any' or 'repl'")
        self.code_fences: CodeFences = code_fences
        self.custom_system_prompt = custom_system_prompt
        self.max_errors = None if max_errors is None else positive_int("max_errors", max_errors, 1)
        self.max_tokens = None if max_tokens is None else positive_int("max_tokens", max_tokens, 1)
        self.compaction = bool(compaction)
        if not isinstance(compaction_threshold_pct, int | float) or not 0 < compaction_threshold_pct <= 1:
            raise ConfigurationError(f"compaction_threshold_pct={compaction_threshold_pct!r} must be in (0, 1]")
        self.compaction_threshold_pct = float(compaction_threshold_pct)
        self.context_window = positive_int("context_window", context_window, 1000)
        self.max_concurrent_subcalls = (
            None
            if max_concurrent_subcalls is None
            else positive_int("max_concurrent_subcalls", max_concurrent_subcalls, 1)
        )
        self.persistent = bool(persistent)
        self._session_options: dict[str, Any] = {
            "context_alias": context_alias,
            "idle_timeout": session_idle_timeout,
            "max_lifetime": session_max_lifetime,
        }
        # Validated now; the session itself (a thread and a loop) starts with the first call.
        check_session_options(**self._session_options)
        self._session: Session | None = None
        self._session_lock = threading.Lock()

    # -- public API -------------------------------------------------------------------------------
    def completion(self, prompt: Any, root_prompt: str | None = None, **kwargs: Any) -> RLMResult:
        """Answer `root_prompt` about `prompt` (the context). Works in sync code and inside a running loop.

        Args:
            prompt: The context: a str, a list of strings or documents, or a dict.
            root_prompt: The question (None when the context itself says what to do).
            **kwargs: As for `acompletion`.
        """
        if self.persistent:
            session = self._open_session()
            if session.runner.in_loop():
                raise ConfigurationError("a persistent RLM cannot be called from inside its own run")
            return session.runner.submit(self._acompletion(prompt, root_prompt, session=session, **kwargs)).result()
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
        if self.persistent:
            return await self._persistent_acompletion(
                prompt,
                root_prompt,
                callbacks=callbacks,
                cancel_event=cancel_event,
                instructions=instructions,
                final_validator=final_validator,
                run_id=run_id,
            )
        return await self._acompletion(
            prompt,
            root_prompt,
            callbacks=callbacks,
            cancel_event=cancel_event,
            instructions=instructions,
            final_validator=final_validator,
            run_id=run_id,
        )

    async def _persistent_acompletion(
        self, prompt: Any, root_prompt: str | None, *, cancel_event: asyncio.Event | None, **kwargs: Any
    ) -> RLMResult:
        """Run on the session's own loop (where its sandbox lives), from whatever loop the caller is in."""
        session = self._open_session()
        if session.runner.in_loop():
            return await self._acompletion(prompt, root_prompt, session=session, cancel_event=cancel_event, **kwargs)
        callbacks = list(kwargs.pop("callbacks", None) or [])

        def run(cancel: asyncio.Event | None, bridged: list[Callback]) -> Coroutine[Any, Any, RLMResult]:
            return self._acompletion(
                prompt, root_prompt, session=session, cancel_event=cancel, callbacks=bridged, **kwargs
            )

        return await session.runner.call(run, cancel_event, callbacks)

    def _open_session(self) -> Session:
        with self._session_lock:
            if self._session is None or self._session.closed:
                self._session = Session(**self._session_options)
                # A persistent RLM dropped without close() still closes its sandbox (at the latest, at exit).
                weakref.finalize(self, self._session.close_quietly)
            return self._session

    @property
    def session(self) -> Session | None:
        """The persistent session (None before the first call of a ``persistent=True`` RLM, or after `close`)."""
        return self._session

    def close(self) -> None:
        """Close the persistent session's sandbox (a no-op without one). Safe to call twice."""
        with self._session_lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()

    async def aclose(self) -> None:
        """`close` for async code (the sandbox is closed on a worker thread)."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> RLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> RLM:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _acompletion(
        self,
        prompt: Any,
        root_prompt: str | None = None,
        *,
        callbacks: Sequence[Callback] | None = None,
        cancel_event: asyncio.Event | None = None,
        instructions: str | None = None,
        final_validator: FinalValidator | None = None,
        run_id: str | None = None,
        session: Session | None = None,
    ) -> RLMResult:
        if session is not None:
            async with session.lock():
                return await self._run_once(
                    prompt, root_prompt, callbacks, cancel_event, instructions, final_validator, run_id, session
                )
        return await self._run_once(
            prompt, root_prompt, callbacks, cancel_event, instructions, final_validator, run_id, None
        )

    async def _run_once(
        self,
        prompt: Any,
        root_prompt: str | None,
        callbacks: Sequence[Callback] | None,
        cancel_event: asyncio.Event | None,
        instructions: str | None,
        final_validator: FinalValidator | None,
        run_id: str | None,
        session: Session | None,
    ) -> RLMResult:
        original_prompt = prompt
        context = validate_context(flatten_messages(prompt))
        run_id = run_id or new_run_id()
        started = time.perf_counter()
        bus = EventBus([*self.callbacks, *(callbacks or [])])
        if self.verbose:
            bus.subscribe(ConsolePrinter())
        run_log = self._open_log(run_id, context, root_prompt)
        if run_log is not None:
            bus.subscribe(run_log.event)
        tree = await self._build_tree(bus)
        level = RunLevel(
            tree,
            context,
            root_prompt,
            run_id=run_id,
            instructions=instructions,
            final_validator=final_validator,
            session=session,
        )
        restarted = session.ended if session is not None else None
        if session is not None:
            session.ended = None
        try:
            result = await self._run_cancellable(level, cancel_event, started)
        finally:
            if run_log is not None:
                run_log.close()
            await close_shielded(self._close_tree(tree))
        result.trajectory_file = run_log.path if run_log is not None else None
        result.root_model = tree.root_client.model_name
        result.prompt = original_prompt
        result.metadata.update(
            depth_reached=tree.max_depth_reached,
            sub_calls=tree.budget.sub_calls_started,
            root_model=tree.root_client.model_name,
        )
        if run_log is not None and run_log.records is not None:
            result.metadata["trajectory"] = run_log.trajectory()
        if session is not None:
            result.metadata["session"] = {
                "contexts": session.context_count,
                "histories": session.history_count,
                **({"restarted": restarted} if restarted else {}),
            }
        if self.raise_on_budget:
            limits = {
                "root_tokens": self.limits.max_root_tokens,
                "sub_tokens": self.limits.max_sub_tokens,
                "max_tokens": self.max_tokens,
                "max_errors": self.max_errors,
            }
            raise_reference_error(result, self.limits.timeout, self.limits.max_cost, limits)
        return result

    def start(self, prompt: Any, root_prompt: str | None = None, **kwargs: Any) -> RunHandle:
        """Start a run in the running event loop and return its handle at once.

        ``handle.events()`` streams its events, ``await handle.result()`` gives its `RLMResult`,
        ``handle.cancel()`` stops it (the result then says ``finish_reason="cancelled"``).

        Args:
            prompt: The context.
            root_prompt: The question.
            **kwargs: As for `acompletion` (a ``cancel_event`` given becomes the handle's).
        """
        extra = list(kwargs.pop("callbacks", None) or [])
        cancel = kwargs.pop("cancel_event", None)

        def run(put: Callback, cancel_event: asyncio.Event) -> Coroutine[Any, Any, RLMResult]:
            return self.acompletion(prompt, root_prompt, callbacks=[*extra, put], cancel_event=cancel_event, **kwargs)

        return RunHandle(run, cancel)

    async def astream(self, prompt: Any, root_prompt: str | None = None, **kwargs: Any) -> AsyncIterator[Event]:
        """Run and yield every event as it happens; the last one is the top-level `RunFinished`.

        Leaving the loop early cancels the run (its sandbox is closed). Takes the keyword arguments of
        `acompletion`; `start` gives the result as well.
        """
        handle = self.start(prompt, root_prompt, **kwargs)
        try:
            async for event in handle.events():
                yield event
            await handle.result()  # re-raises a failure of the run
        finally:
            await handle.aclose()

    # -- internals --------------------------------------------------------------------------------
    async def _run_cancellable(self, level: RunLevel, cancel_event: asyncio.Event | None, started: float) -> RLMResult:
        if cancel_event is None:
            return await level.run()
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
        return RLMResult(
            response=level.progress.partial_answer(),
            finish_reason="cancelled",
            usage_summary=level.tree.budget.usage,
            iterations=level.progress.iterations,
            run_id=level.run_id,
            execution_time=time.perf_counter() - started,
            error="the run was cancelled",
        )

    async def _build_tree(self, bus: EventBus) -> RunTree:
        budget = Budget(self.limits, PriceTable(self.prices))
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
            final_protocol=self.final_protocol,
            system_prompt=self.custom_system_prompt,
            max_errors=self.max_errors,
            max_tokens=self.max_tokens,
            compaction=self.compaction,
            compaction_threshold_pct=self.compaction_threshold_pct,
            context_window=self.context_window,
            code_fences=self.code_fences,
        )
        return RunTree(
            settings=settings,
            budget=budget,
            bus=bus,
            root_client=root,
            sub_clients=subs,
            max_concurrency=self.max_concurrency,
            max_nested=self.max_concurrent_subcalls,
            tools=self.tools,
            sub_tools=self.sub_tools,
            values=self.values,
            sub_values=self.sub_values,
            value_notes=self.value_notes,
            sub_value_notes=self.sub_value_notes,
            owned_clients=owned,
            max_sandboxes=self.max_sandboxes,
        )

    async def _close_tree(self, tree: RunTree) -> None:
        await asyncio.gather(*(client.aclose() for client in tree.owned_clients), return_exceptions=True)
        tree.cleanup()

    def _open_log(self, run_id: str, context: RunContext, query: str | None) -> RunLog | None:
        if self.logger is None:
            return None
        header = {
            "query": query,
            "context": context.description,
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


__all__ = ["RLM", "RunHandle", "run_sync"]
