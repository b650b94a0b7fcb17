"""`ChatRLM`: a Recursive Language Model behind LangChain's chat model interface."""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.utils.utils import LC_ID_PREFIX
from pydantic import Field, PrivateAttr, model_validator

from rlm_adapters.core import RLM, RLMResult
from rlm_adapters.core.lm import LMClient
from rlm_adapters.hosting import POOL_DEFAULTS
from rlm_adapters.langchain._callbacks import CAPTURE, capturing
from rlm_adapters.langchain._engine import EngineFields, build_engine, options_doc
from rlm_adapters.langchain._results import answer_chunks, answer_message, answer_text, chat_result, result_metadata
from rlm_adapters.langchain._run import Engine, acollect, apieces, collect, pieces, start
from rlm_adapters.langchain._structured import structured_output
from rlm_adapters.langchain._thread_inputs import ThreadInputs
from rlm_adapters.langchain._threads import ThreadEngines, fresh, thread_limits
from rlm_adapters.langchain._tool_calling import ToolLike, bind_tools

THREAD: contextvars.ContextVar[str | None] = contextvars.ContextVar("rlm_thread_id", default=None)


def thread_of(config: RunnableConfig | None) -> str | None:
    """The ``thread_id`` in a call's ``configurable`` (LangGraph's convention), if any; a call made inside a
    graph's node without a config inherits the node's (as every runnable does)."""
    value = (ensure_config(config).get("configurable") or {}).get("thread_id")
    return None if value is None else str(value)


@contextlib.contextmanager
def call_scope(config: RunnableConfig | None, *, streaming: bool) -> Iterator[RunnableConfig | None]:
    """The scope of one `invoke` / `ainvoke` / `stream` / `astream`: what `_generate` and `_stream` need of
    the call's config, in context variables (LangChain passes them none).

    Its ``thread_id`` goes to `THREAD` (for `persistent_threads`); a streaming call also gets a `RunCapture`
    in its callbacks (LangChain calls `_stream` without a run manager, and progress events need the run's
    id). Yields the config to hand on to LangChain.
    """
    tokens: list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]] = [(THREAD, THREAD.set(thread_of(config)))]
    if streaming:
        config, capture = capturing(config)
        tokens.append((CAPTURE, CAPTURE.set(capture)))
    try:
        yield config
    finally:
        for variable, token in reversed(tokens):
            with contextlib.suppress(ValueError):  # a stream closed from another context: nothing to restore
                variable.reset(token)


def _same_id(chunk: ChatGenerationChunk, chat: ChatResult, run_id: UUID) -> ChatGenerationChunk:
    """Give the streamed chunk and the final message one id, as LangChain's own streaming path does.

    LangGraph's ``stream_mode="messages"`` forwards the tokens, then drops the node's final message only
    when its id matches theirs; with different ids every answer would arrive twice.
    """
    message_id = f"{LC_ID_PREFIX}-{run_id}"
    chunk.message.id = message_id
    chat.generations[0].message.id = message_id
    return chunk


def _live_chunk(piece: str, run_id: UUID) -> ChatGenerationChunk:
    """A piece of the answer streamed as the model writes it, with the id the final message will have."""
    return ChatGenerationChunk(message=AIMessageChunk(content=piece, id=f"{LC_ID_PREFIX}-{run_id}"))


class ChatRLM(BaseChatModel, EngineFields):
    """A Recursive Language Model behind LangChain's chat model interface.

    A conversation under `direct_below_tokens` tokens (default 16,000: a drop-in for a plain chat model) is
    one plain call to the root model, its messages as they are, its tokens streamed as message chunks as
    they arrive. Longer ones are not sent to a model: they become the variable `context` of a sandboxed
    Python REPL (one human message as its text, several as a list of ``{"role", "content"}``), system
    messages become instructions, and the root model answers the last human message by writing code and
    calling sub-models. While such a run works, every engine event is dispatched as a LangChain custom event
    named ``rlm_progress`` (see `astream_events` / `on_custom_event`); the answer then streams as message
    chunks. The last chunk has ``chunk_position="last"``, usage over all depths and response metadata,
    whose ``route`` and ``route_reason`` say which route answered and why.

    It can be an agent's own model: `bind_tools` offers tools, and the root model ends its turn by calling
    them (``call_tool(...)`` in the REPL, or a ``CALL_TOOL`` line), so the answer is an `AIMessage` with
    checked ``tool_calls``. The history and the tool results stay in the REPL, never in the root model's
    prompt. `RLMTool` is the other way round: an RLM as a tool of another model's agent.

    Example:
        ```python
        llm = ChatRLM(model="gpt-5-mini", environment="subprocess", max_depth=1)
        chain = prompt | llm | StrOutputParser()
        ```

    The fields that are `RLM` options mean what `RLM`'s keywords say (their entries below come from the
    options' declarations); ``batch`` takes LangChain's own ``max_concurrency`` from its config for the
    number of runs, while the field `max_concurrency` is the engine's ceiling per model endpoint.

    Args:
        model: The root model's name for SDK backends (``openai``, ``anthropic``, ``vllm``, ``openrouter``)
            and the backends with their own settings (``azure_openai``, ``bedrock``, ``gemini``, ``litellm``,
            ``portkey``, ``vercel``).
        temperature: Sampling temperature of every model call (SDK backends).
        max_tokens: Output token cap of every model call (SDK backends).
        timeout: Seconds per model request (SDK backends; also ``request_timeout=``, the attribute's name); the
            whole run's wall clock is `run_timeout`.
        stop: Stop sequences: the answer is cut at the first one (the models themselves never get them).
        max_retries: SDK retries per model request.
        streaming: Make `invoke` stream through the callbacks.
        api_key: API key for SDK backends (else the provider's environment variable).
        base_url: Endpoint of an OpenAI-compatible server.
        root_model: A LangChain chat model as the root model (overrides `backend`).
        sub_model: A LangChain chat model as the sub model (overrides `other_backends`).
        backend: The engine's root backend: a name or a model client (when `root_model` is not given).
        backend_kwargs: Its settings; LangChain's standard parameters fill in what they do not set.
        other_backends: Sub-model backends (when `sub_model` is not given).
        other_backend_kwargs: Their settings, one dict per backend.
        {engine_options}
        logger: Writes a JSONL trajectory per run (its path is in ``response_metadata``).
        cache: A file path or a `CallCache`: the engine's call cache, as for `RLM` (an invocation run again
            after a crash replays the model calls that had come back; also ``call_cache=``). LangChain's own
            values (a ``BaseCache``, True, False) keep LangChain's meaning: a cache of whole answers.
        persistent_threads: Keep one persistent REPL per thread: calls whose config carries the same
            ``configurable={"thread_id": ...}`` (LangGraph's convention) share their variables, and each
            call's new messages (those the thread's REPL has not been given yet: an agent's previous
            answer, the tool results, the next question) are added as ``context_1``, ``context_2``, ... .
            `close()` ends them all.
        max_threads: Persistent threads open at once; one more closes the least recently used idle one
            (with every one busy, the call raises `SessionLimitError`).
        thread_idle_timeout: Seconds without a call after which a thread's REPL is closed (None: never).
        thread_max_lifetime: Seconds after its first call at which a thread's REPL is closed (None: never;
            a call in flight finishes first).
    """

    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    streaming: bool = False
    persistent_threads: bool = False
    max_threads: int = POOL_DEFAULTS.max_sessions
    thread_idle_timeout: float | None = POOL_DEFAULTS.idle_timeout
    thread_max_lifetime: float | None = POOL_DEFAULTS.max_lifetime
    _threads: ThreadEngines | None = PrivateAttr(default=None)
    _threads_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _thread_inputs: ThreadInputs = PrivateAttr(default_factory=ThreadInputs)

    @model_validator(mode="after")
    def _check_threads(self) -> ChatRLM:
        thread_limits(self.max_threads, self.thread_idle_timeout, self.thread_max_lifetime)
        return self

    # -- LangChain's identity -----------------------------------------------------------------------
    @property
    def _llm_type(self) -> str:
        return "rlm-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self._root_name(None),
            "backend": self.backend if isinstance(self.backend, str) else type(self.backend).__name__,
            "environment": self.environment,
            "max_depth": self.max_depth,
            "max_iterations": self.max_iterations,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider="rlm", ls_model_name=self._root_name(kwargs.get("model")), ls_model_type="chat"
        )
        if self.temperature is not None:
            params["ls_temperature"] = self.temperature
        if self.max_tokens is not None:
            params["ls_max_tokens"] = self.max_tokens
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    def _root_name(self, override: Any) -> str:
        if isinstance(override, str) and override:
            return override
        if self.root_model is not None:
            from rlm_adapters.core.lm import chat_model_name

            return chat_model_name(self.root_model)
        if isinstance(self.backend, LMClient):
            return self.backend.model_name
        return str(self.model_name or self.backend_kwargs.get("model_name") or self.backend)

    # -- the engine -----------------------------------------------------------------------------------
    def _engine(self, model_override: str | None = None) -> RLM:
        """A fresh `RLM` configured from this model's `EngineFields` (cheap: clients are built per run anyway)."""
        return build_engine(self, model_override)

    def _engine_for(self, run_manager: Any) -> Engine:
        """The engine of one call: its thread's persistent `RLM` (held for the call) when `persistent_threads`
        is on and the call's config names a ``thread_id``, else a fresh one."""
        thread = THREAD.get() if self.persistent_threads else None
        if thread is None:
            return fresh(self._engine)
        with self._threads_lock:
            if self._threads is None:
                limits = thread_limits(self.max_threads, self.thread_idle_timeout, self.thread_max_lifetime)
                self._threads = ThreadEngines(limits, lambda model: build_engine(self, model, persistent=True))
            return self._threads.engine(str(thread))

    def close(self) -> None:
        """Close every thread's persistent REPL (``persistent_threads=True``); a call in flight on one
        ends with ``finish_reason="cancelled"``."""
        with self._threads_lock:
            threads = self._threads
        if threads is not None:
            threads.close()

    # -- results ----------------------------------------------------------------------------------------
    def _chunks(
        self, result: RLMResult, stop: list[str] | None, kwargs: dict[str, Any], streamed: str = ""
    ) -> list[ChatGenerationChunk]:
        text = answer_text(result, stop or self.stop, kwargs)
        usage, response = result_metadata(result, self._root_name(None))
        return answer_chunks(result, text, kwargs.get("rlm_output_schema") is not None, usage, response, streamed)

    def _result(self, result: RLMResult, stop: list[str] | None, kwargs: dict[str, Any]) -> ChatResult:
        usage, response = result_metadata(result, self._root_name(None))
        return chat_result(answer_message(result, answer_text(result, stop or self.stop, kwargs), usage, response))

    def _live(self, stop: list[str] | None) -> bool:
        """Whether the answer's pieces may stream as the model writes them (the direct route's): not when a
        stop sequence may cut the answer after they were sent."""
        return not (stop or self.stop)

    def _should_stream(
        self,
        *,
        async_api: bool,
        run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> bool:
        # Only `stream` / `astream` take the `_stream` path. `invoke` keeps `_generate`, which gets the run
        # manager that progress events need, and sends the answer's tokens itself when streaming is wanted.
        return bool(kwargs.get("stream")) and super()._should_stream(
            async_api=async_api, run_manager=run_manager, **kwargs
        )

    # -- LangChain's four entry points ------------------------------------------------------------------
    # On the direct route the answer's pieces stream as the model writes them (`_live`); on the RLM route the
    # engine's events go to the run's callbacks as ``rlm_progress`` custom events as they happen, and the
    # answer streams once it exists. Either way the last chunk carries the usage and the response metadata.
    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tokens = run_manager is not None and super()._should_stream(async_api=True, run_manager=run_manager)
        streamed: list[str] = []

        async def on_piece(piece: str) -> None:
            assert run_manager is not None
            streamed.append(piece)
            await run_manager.on_llm_new_token(piece, chunk=_live_chunk(piece, run_manager.run_id))

        live = on_piece if tokens and self._live(stop) else None
        result = await acollect(
            self._engine_for(run_manager), messages, kwargs, run_manager, self._thread_inputs, on_piece=live
        )
        chat = self._result(result, stop, kwargs)
        if run_manager is not None and tokens:
            for chunk in self._chunks(result, stop, kwargs, "".join(streamed)):
                await run_manager.on_llm_new_token(chunk.text, chunk=_same_id(chunk, chat, run_manager.run_id))
        return chat

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tokens = run_manager is not None and super()._should_stream(async_api=False, run_manager=run_manager)
        streamed: list[str] = []

        def on_piece(piece: str) -> None:
            assert run_manager is not None
            streamed.append(piece)
            run_manager.on_llm_new_token(piece, chunk=_live_chunk(piece, run_manager.run_id))

        live = on_piece if tokens and self._live(stop) else None
        result = collect(
            self._engine_for(run_manager), messages, kwargs, run_manager, self._thread_inputs, on_piece=live
        )
        chat = self._result(result, stop, kwargs)
        if run_manager is not None and tokens:
            for chunk in self._chunks(result, stop, kwargs, "".join(streamed)):
                run_manager.on_llm_new_token(chunk.text, chunk=_same_id(chunk, chat, run_manager.run_id))
        return chat

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        streamed: list[str] = []
        live = self._live(stop)
        handle = start(self._engine_for(run_manager), messages, kwargs, self._thread_inputs, own_thread=False)
        try:
            async for piece in apieces(handle, run_manager):
                if live:
                    streamed.append(piece)
                    chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
                    if run_manager is not None:
                        await run_manager.on_llm_new_token(piece, chunk=chunk)
                    yield chunk
            result = await handle.result()
        finally:
            await handle.aclose()  # a consumer that stops reading stops the run
        for chunk in self._chunks(result, stop, kwargs, "".join(streamed)):
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        streamed: list[str] = []
        live = self._live(stop)
        handle = start(self._engine_for(run_manager), messages, kwargs, self._thread_inputs, own_thread=True)
        try:
            for piece in pieces(handle, run_manager):
                if live:
                    streamed.append(piece)
                    chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
                    if run_manager is not None:
                        run_manager.on_llm_new_token(piece, chunk=chunk)
                    yield chunk
            result = handle.wait()
        finally:
            handle.close()  # a consumer that stops reading stops the run
        for chunk in self._chunks(result, stop, kwargs, "".join(streamed)):
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    # LangChain hands `_generate` / `_stream` no config: what they need of it travels in `call_scope`.
    def invoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """LangChain's `invoke`, with the config's ``thread_id`` made known to `persistent_threads`."""
        with call_scope(config, streaming=False) as config:
            return super().invoke(input, config, stop=stop, **kwargs)

    async def ainvoke(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AIMessage:
        """LangChain's `ainvoke`, with the config's ``thread_id`` made known to `persistent_threads`."""
        with call_scope(config, streaming=False) as config:
            return await super().ainvoke(input, config, stop=stop, **kwargs)

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        """LangChain's `stream`, with its ``thread_id`` and this run's id made known to the progress events."""
        with call_scope(config, streaming=True) as config:
            yield from super().stream(input, config, stop=stop, **kwargs)

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """LangChain's `astream`, with its ``thread_id`` and this run's id made known to the progress events."""
        with call_scope(config, streaming=True) as config:
            async for chunk in super().astream(input, config, stop=stop, **kwargs):
                yield chunk

    # -- tools and structured output ---------------------------------------------------------------------
    def bind_tools(
        self,
        tools: Sequence[ToolLike],
        *,
        tool_choice: Mapping[str, Any] | str | bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Offer `tools` to the root model: it may end its turn by calling them.

        The calls come back as the message's ``tool_calls`` (streamed as ``tool_call_chunks``), each checked
        against its tool's JSON schema; a bad call goes back to the model to mend, and only one it still
        gets wrong after two retries comes back, in ``invalid_tool_calls``. Without a call the answer is
        plain text, as without tools.

        Args:
            tools: Anything LangChain converts with `convert_to_openai_tool`: `BaseTool`s, functions,
                pydantic models, TypedDicts, JSON or OpenAI tool schemas.
            tool_choice: ``None`` / ``"auto"`` (call or answer), ``"any"`` / ``"required"`` / ``True`` (the
                answer must be a call), ``"none"``, a tool's name, or the same in OpenAI's or Anthropic's
                dict form.
            **kwargs: ``parallel_tool_calls`` (False: one call per turn) and ``strict`` (True: the schemas
                in OpenAI's strict form, no extra keys).

        Raises:
            ValueError: A tool, schema, choice or keyword argument that cannot be used.
        """
        return bind_tools(self, tools, tool_choice=tool_choice, **kwargs)

    # -- structured output -------------------------------------------------------------------------------
    def with_structured_output(
        self, schema: dict[str, Any] | type, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """Answer with a value matching `schema` (a pydantic model, a TypedDict or a JSON schema).

        The engine's typed answers do the work (``output_schema``): the root model builds the value in the
        REPL and finishes with ``FINAL_VAR``; it is validated, an invalid value goes back to the model once,
        and a second failure raises `OutputParserException` (see `rlm_adapters.langchain._structured`).

        Args:
            schema: The output schema (None only with ``method="json_mode"``).
            include_raw: Return ``{"raw", "parsed", "parsing_error"}`` instead of the parsed value.
            **kwargs: ``method`` (``json_schema``, ``function_calling``: the value as a tool call, or
                ``json_mode``) and ``strict`` (accepted; the value is always checked).
        """
        return structured_output(self, schema, include_raw=include_raw, **kwargs)


# The entries of the fields that are `RLM` options, from their declarations (`core.settings`).
ChatRLM.__doc__ = (ChatRLM.__doc__ or "").replace(" " * 8 + "{engine_options}", options_doc(" " * 8))
