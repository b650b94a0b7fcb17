"""`RLM`: the public entry point, with the seeds' (``rlms``) constructor and methods."""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import Any, Unpack

import rlm_adapters.core.engine.compat as compat
from rlm_adapters.core.account import Account
from rlm_adapters.core.attributes import SettingsView
from rlm_adapters.core.cache import CacheSpec, open_cache
from rlm_adapters.core.engine.backends import Backends
from rlm_adapters.core.engine.bridge import run_sync
from rlm_adapters.core.engine.budget_hook import OnBudget, check_hook
from rlm_adapters.core.engine.handle import RunHandle
from rlm_adapters.core.engine.loop import FinalValidator
from rlm_adapters.core.engine.observers import RunObserver
from rlm_adapters.core.engine.run import RunRequest, execute
from rlm_adapters.core.engine.session import Session
from rlm_adapters.core.engine.session_holder import SessionHolder
from rlm_adapters.core.engine.session_replay import SessionTurn, replay
from rlm_adapters.core.engine.tool_calls import ToolDefinition
from rlm_adapters.core.engine.tools import ToolInput, parse_tools
from rlm_adapters.core.events import Callback, Event
from rlm_adapters.core.lm import LMClient
from rlm_adapters.core.output import OutputSchema, SchemaInput
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.settings import (
    RLMOptions,
    keyword_parameters,
    options_doc,
    resolve_aliases,
    settings_from,
)
from rlm_adapters.core.tracing import Tracing, check_tracing
from rlm_adapters.core.trajectory import RLMLogger


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
        logger: Writes a JSONL trajectory per run.
        callbacks: Called with every event of every run (sync or async callables).
        custom_tools: Host-side functions (or plain values) put into the top-level REPL:
            ``{"name": fn}`` or ``{"name": {"tool": fn, "description": "..."}}``.
        custom_sub_tools: The same for nested RLMs.
        sampling_args: Request options of the root model (``temperature``, ``top_p``, ``seed``, ...).
        sub_sampling_args: The same for `llm_query`'s default model (without `other_backends`, the root
            backend is mirrored as the sub-model with these options, as in the reference).
        max_timeout: The reference's name for `run_timeout`.
        max_budget: The reference's name for `max_cost`.
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
        **options: The options of a run (`RLMOptions`; each checked into `RLMSettings`):
            {options}
    """

    def __init__(
        self,
        backend: str | LMClient = "openai",
        backend_kwargs: dict[str, Any] | None = None,
        other_backends: Sequence[str | LMClient] | None = None,
        other_backend_kwargs: Sequence[dict[str, Any]] | None = None,
        *,
        logger: RLMLogger | None = None,
        callbacks: Sequence[Callback] | None = None,
        custom_tools: Mapping[str, ToolInput] | None = None,
        custom_sub_tools: Mapping[str, ToolInput] | None = None,
        sampling_args: Mapping[str, Any] | None = None,
        sub_sampling_args: Mapping[str, Any] | None = None,
        max_timeout: float | None = None,
        max_budget: float | None = None,
        cache: CacheSpec = None,
        on_budget: OnBudget | None = None,
        tracing: Tracing = None,
        **options: Unpack[RLMOptions],
    ) -> None:
        backend_kwargs, other_backends, other_backend_kwargs = compat.apply_sampling(
            backend, backend_kwargs, other_backends, other_backend_kwargs, sampling_args, sub_sampling_args
        )
        given = resolve_aliases(options)
        spelled = "timeout" if options.get("timeout") is not None else "run_timeout"  # as the caller wrote it
        given["run_timeout"] = compat.either(spelled, given.get("run_timeout"), "max_timeout", max_timeout)
        given["max_cost"] = compat.either("max_cost", given.get("max_cost"), "max_budget", max_budget)
        if "environment" in given:
            given["environment"] = compat.environment(given["environment"])
        self.settings = settings_from(given)
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
            return self._session.complete(self, RunRequest(prompt, root_prompt, **kwargs))
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
        observers: Sequence[RunObserver] | None = None,
        chat: Sequence[Mapping[str, Any]] | None = None,
        account: Account | None = None,
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
            observers: What watches this run from outside (`RunObserver`: its cited sources are one,
                `rlm_adapters.sources.SourceTracker`). Each is told the run starts, each event, when the answer
                exists, and how the run ended; what they add to the result gets ``sources_timeout`` seconds.
            chat: The conversation `prompt` and `root_prompt` were made from, as ``{"role", "content"}`` dicts
                (a chat adapter's): on the direct route (``direct_below_tokens``) the model is sent these
                messages instead of the context and question.
            account: Who else pays for the run's model calls (`rlm_adapters.core.Account`: a key of a shared
                store, as ``rlm serve --store`` gives each key's runs). Each call holds its worst-case price
                there before it is sent; when the account refuses, the run ends at the budget
                (``finish_reason="budget"``, limit ``key_budget``) with its partial answer.

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
            observers=tuple(observers or ()),
            chat=chat,
            account=account,
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


# What `inspect.signature(RLM)` and ``help(RLM)`` show: every option keyword, from its declaration.
_init = inspect.signature(RLM.__init__)
_explicit = [p for p in _init.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
RLM.__init__.__signature__ = _init.replace(parameters=[*_explicit, *keyword_parameters()])  # type: ignore[attr-defined]
RLM.__doc__ = (RLM.__doc__ or "").replace(" " * 12 + "{options}", options_doc(" " * 12))

__all__ = ["RLM", "RunHandle", "run_sync"]
