"""`RLM`: the public entry point, with the seeds' (``rlms``) constructor and methods."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any

import rlm_adapters.core.engine.compat as compat
from rlm_adapters.core.budget import Limits
from rlm_adapters.core.cache import CacheSpec, open_cache
from rlm_adapters.core.engine.bridge import run_sync
from rlm_adapters.core.engine.budget_hook import OnBudget, check_hook
from rlm_adapters.core.engine.loop import FinalValidator
from rlm_adapters.core.engine.models import Backends
from rlm_adapters.core.engine.parsing import CodeFences
from rlm_adapters.core.engine.run import RunRequest, execute
from rlm_adapters.core.engine.session import ContextAlias, Session
from rlm_adapters.core.engine.session_holder import SessionHolder
from rlm_adapters.core.engine.session_replay import SessionTurn, replay
from rlm_adapters.core.engine.tool_calls import ToolDefinition
from rlm_adapters.core.engine.tools import ToolInput, parse_tools
from rlm_adapters.core.events import Callback, Event
from rlm_adapters.core.handle import RunHandle
from rlm_adapters.core.lm import LMClient
from rlm_adapters.core.output import OutputSchema, SchemaInput
from rlm_adapters.core.pricing import Price
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.settings import DEFAULTS, FinalProtocol, RLMSettings
from rlm_adapters.core.settings_view import SettingsView
from rlm_adapters.core.tracing import Tracing, check_tracing
from rlm_adapters.core.trajectory import RLMLogger
from rlm_adapters.errors import ConfigurationError


class RLM(SettingsView):
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
        max_concurrency: Hard ceiling on calls in flight per model endpoint (default 256). Below it the
            engine adapts: it starts at 128 (or the ceiling, if lower; or where this process's last run
            left that endpoint), grows while calls succeed and backs off when the endpoint answers
            429 / 503 or its rate-limit headers run out.
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
        prices: Extra prices, ``{"model": (usd_per_mtok_in, usd_per_mtok_out)}``, or four numbers with the
            prompt cache's read and write prices.
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
        max_batch: The most prompts one ``llm_query_batched`` / ``rlm_query_batched`` call may hold; a
            longer batch fails at once with a message naming this limit.
        sampling_args: Request options of the root model (``temperature``, ``top_p``, ``seed``, ...).
        sub_sampling_args: The same for `llm_query`'s default model (without `other_backends`, the root
            backend is mirrored as the sub-model with these options, as in the reference).
        max_timeout: The reference's name for `timeout`.
        max_budget: The reference's name for `max_cost`.
        code_fences: Which fenced blocks run: ``"any"`` (```repl, ```python, bare) or ``"repl"`` (only
            ```repl, as the reference).
        cache: A call cache: a file path (an `SQLiteCallCache`, created ``0600`` if missing) or a `CallCache`.
            Every model call is looked up first and every reply stored as it returns, so running the same
            call again after a crash replays what finished and goes live at the first call that had not.
            Replayed calls cost nothing and count toward the limits as the originals did (see
            ``docs/durable-runs.md``).
        on_budget: Asked before a limit stops the run: ``fn(limit_name, used, limit)`` (sync or async) returns
            a new limit to go on with, or None to stop. Raisable: ``max_root_tokens``, ``max_sub_tokens``,
            ``max_cost``, ``max_sub_calls``, ``max_iterations`` (see `rlm_adapters.core.engine.budget_hook`).
        tracing: OpenTelemetry spans of every run (GenAI conventions, docs/tracing.md): None traces when a
            tracer provider is configured, True always (needs ``rlm-adapters[otel]``), False never; or
            give a ``TracerProvider``.
    """

    def __init__(
        self,
        backend: str | LMClient = "openai",
        backend_kwargs: dict[str, Any] | None = None,
        other_backends: Sequence[str | LMClient] | None = None,
        other_backend_kwargs: Sequence[dict[str, Any]] | None = None,
        environment: str = DEFAULTS.environment,
        environment_kwargs: dict[str, Any] | None = None,
        max_depth: int = DEFAULTS.max_depth,
        max_iterations: int = DEFAULTS.max_iterations,
        max_root_tokens: int = DEFAULTS.limits.max_root_tokens,
        max_sub_tokens: int = DEFAULTS.limits.max_sub_tokens,
        max_cost: float | None = DEFAULTS.limits.max_cost,
        timeout: float | None = DEFAULTS.limits.timeout,
        max_concurrency: int = DEFAULTS.max_concurrency,
        max_sub_calls: int | None = DEFAULTS.limits.max_sub_calls,
        max_sandboxes: int = DEFAULTS.max_sandboxes,
        logger: RLMLogger | None = None,
        verbose: bool = DEFAULTS.verbose,
        callbacks: Sequence[Callback] | None = None,
        custom_tools: Mapping[str, ToolInput] | None = None,
        custom_sub_tools: Mapping[str, ToolInput] | None = None,
        prices: Mapping[str, Price] | None = None,
        raise_on_budget: bool = DEFAULTS.raise_on_budget,
        max_output_chars: int = DEFAULTS.max_output_chars,
        instructions: str | None = DEFAULTS.instructions,
        *,
        persistent: bool = DEFAULTS.persistent,
        session_idle_timeout: float | None = DEFAULTS.session_idle_timeout,
        session_max_lifetime: float | None = DEFAULTS.session_max_lifetime,
        context_alias: ContextAlias = DEFAULTS.context_alias,
        final_protocol: FinalProtocol = DEFAULTS.final_protocol,
        custom_system_prompt: str | None = DEFAULTS.custom_system_prompt,
        max_errors: int | None = DEFAULTS.max_errors,
        max_tokens: int | None = DEFAULTS.max_tokens,
        compaction: bool = DEFAULTS.compaction,
        compaction_threshold_pct: float = DEFAULTS.compaction_threshold_pct,
        context_window: int = DEFAULTS.context_window,
        max_concurrent_subcalls: int | None = DEFAULTS.max_concurrent_subcalls,
        max_batch: int = DEFAULTS.max_batch,
        sampling_args: Mapping[str, Any] | None = None,
        sub_sampling_args: Mapping[str, Any] | None = None,
        max_timeout: float | None = None,
        max_budget: float | None = None,
        code_fences: CodeFences = DEFAULTS.code_fences,
        cache: CacheSpec = None,
        on_budget: OnBudget | None = None,
        tracing: Tracing = None,
    ) -> None:

        backend_kwargs, other_backends, other_backend_kwargs = compat.apply_sampling(
            backend, backend_kwargs, other_backends, other_backend_kwargs, sampling_args, sub_sampling_args
        )
        timeout = compat.either("timeout", timeout, "max_timeout", max_timeout)
        max_cost = compat.either("max_cost", max_cost, "max_budget", max_budget)
        self.settings = RLMSettings(
            limits=Limits(max_root_tokens, max_sub_tokens, max_cost, timeout, max_sub_calls),
            max_depth=max_depth,
            max_iterations=max_iterations,
            max_concurrency=max_concurrency,
            max_concurrent_subcalls=max_concurrent_subcalls,
            max_batch=max_batch,
            max_sandboxes=max_sandboxes,
            max_output_chars=max_output_chars,
            max_errors=max_errors,
            max_tokens=max_tokens,
            environment=compat.environment(environment),
            environment_kwargs=environment_kwargs or {},
            instructions=instructions,
            custom_system_prompt=custom_system_prompt,
            final_protocol=final_protocol,
            code_fences=code_fences,
            compaction=bool(compaction),
            compaction_threshold_pct=compaction_threshold_pct,
            context_window=context_window,
            prices=prices or {},
            raise_on_budget=raise_on_budget,
            verbose=verbose,
            persistent=bool(persistent),
            context_alias=context_alias,
            session_idle_timeout=session_idle_timeout,
            session_max_lifetime=session_max_lifetime,
        )
        # Builds every client once, so that a missing key or model name fails here, not mid-run.
        self.backends = Backends.of(backend, backend_kwargs, other_backends, other_backend_kwargs)
        self.logger = logger
        self.tracing = check_tracing(tracing)
        self.callbacks = list(callbacks or [])
        self.tools = parse_tools(custom_tools, "custom_tools")
        # As in the reference: custom_sub_tools=None gives nested runs the same tools; {} gives them none.
        self.sub_tools = parse_tools(custom_tools if custom_sub_tools is None else custom_sub_tools, "custom_sub_tools")
        self.on_budget = check_hook(on_budget)
        # Last: a cache file is opened (and checked) only once every other option is known to be good.
        self.cache, self._owns_cache = open_cache(cache)
        if self._owns_cache and self.cache is not None:
            weakref.finalize(self, self.cache.close)
        self._session = SessionHolder()  # its thread and loop start with the first call

    # -- public API -------------------------------------------------------------------------------
    def completion(self, prompt: Any, root_prompt: str | None = None, **kwargs: Any) -> RLMResult:
        """Answer `root_prompt` about `prompt` (the context). Works in sync code and inside a running loop.

        Args:
            prompt: The context: a str, a list of strings or documents, or a dict.
            root_prompt: The question (None when the context itself says what to do).
            **kwargs: As for `acompletion`.
        """
        if self.persistent:
            session = self._session.open(self)
            if session.runner.in_loop():
                raise ConfigurationError("a persistent RLM cannot be called from inside its own run")
            request = RunRequest(prompt, root_prompt, session=session, **kwargs)
            return session.runner.submit(execute(self, request)).result()
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
        on_budget: OnBudget | None = None,
        output_schema: OutputSchema | SchemaInput | None = None,
        output_retries: int = 1,
        tools: Sequence[ToolDefinition | Mapping[str, Any]] | None = None,
        tool_choice: str | None = None,
        parallel_tool_calls: bool = True,
    ) -> RLMResult:
        """The native async path: run the RLM and return its result.

        Args:
            prompt: The context (with ``persistent=True``, also a `Continuation`: only what is new to the
                session's REPL when it still holds the rest).
            root_prompt: The question.
            callbacks: Extra event callbacks for this run only.
            cancel_event: When set, the run stops, closes its sandbox and returns ``finish_reason="cancelled"``.
            instructions: Extra instructions for this run's root model.
            final_validator: Checks a final answer; an error string sends it back to the model (up to
                `output_retries` times).
            run_id: Use this id for the run (and its trajectory) instead of a fresh one.
            on_budget: This run's budget hook, instead of the `RLM`'s (the same contract).
            tools: The caller's tools (`ToolDefinition`s or OpenAI-style tool dicts). The root model may end
                its turn by calling them (``call_tool(name, **args)`` in the REPL, or a ``CALL_TOOL name {...}``
                line); each call is checked against the tool's JSON schema (a bad one goes back to the model),
                and the run ends with ``finish_reason="tool_calls"`` and the calls in `RLMResult.tool_calls`,
                for the caller to run and send back with its next context.
            tool_choice: ``"auto"`` (None: call or answer), ``"required"`` (or ``"any"``: the run must end
                with a call), ``"none"`` (no calls) or a tool's name (calls of that tool only).
            parallel_tool_calls: Allow several calls in one turn.
            output_schema: The answer's type: a Pydantic model, a dataclass, a TypedDict or a JSON schema dict.
                The root model is shown its JSON schema; the final value is validated, and ``result.value``
                holds the typed answer (see `rlm_adapters.core.output`).
            output_retries: How many invalid final answers are sent back to the root model with what is
                wrong; one more ends the run with ``finish_reason="error"`` and the last value.

        Raises:
            ConfigurationError: A bad tool, JSON schema or `tool_choice`, before anything runs.
        """
        request = RunRequest(
            prompt,
            root_prompt,
            tuple(callbacks or ()),
            cancel_event,
            instructions,
            final_validator,
            run_id,
            on_budget=on_budget,
            output_schema=output_schema,
            output_retries=output_retries,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
        )
        if self.persistent:
            return await self._session.run(self, request)
        return await execute(self, request)

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

    # -- the persistent session -------------------------------------------------------------------
    def replay_session(self, turns: Sequence[SessionTurn]) -> list[RLMResult]:
        """Rebuild a persistent session from the turns another one recorded (``rlm.session.turns``).

        Runs each turn again in this RLM's (new) session; with the call cache the session had, every call
        replays from it and the REPL ends as it was, for nothing (see `rlm_adapters.core.engine.session_replay`).
        """
        return run_sync(self.areplay_session(turns))

    async def areplay_session(self, turns: Sequence[SessionTurn]) -> list[RLMResult]:
        """`replay_session` for async code."""
        return await replay(self, turns)

    @property
    def session(self) -> Session | None:
        """The persistent session (None before the first call of a ``persistent=True`` RLM, or after `close`)."""
        return self._session.session

    def close(self) -> None:
        """Close the persistent session's sandbox and a call cache opened from a path. Safe to call twice."""
        self._session.close()
        if self._owns_cache and self.cache is not None:
            self.cache.close()  # ends its thread; a later run starts it again

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


__all__ = ["RLM", "RunHandle", "run_sync"]
