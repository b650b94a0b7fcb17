"""`ChatRLM`: a Recursive Language Model as a LangChain chat model, and `RLMTool` for agents.

Swap `ChatRLM` into an existing chain and the conversation becomes the RLM's context: it lives in a
sandboxed REPL instead of the prompt, and the root model answers the last human message by writing code
and calling sub-models. Any LangChain chat model can be the root or the sub model.
"""

# ruff: noqa: E402  (langchain-core is imported after `require` so a missing extra names itself)
from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import queue
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast
from uuid import UUID

from rlm_adapters._extras import require

require("langchain_core", extra="langchain", feature="ChatRLM")

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManager,
    CallbackManagerForLLMRun,
    Callbacks,
)
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import (
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableMap,
    RunnablePassthrough,
    ensure_config,
)
from langchain_core.utils.function_calling import convert_to_json_schema
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import ConfigDict, Field, SecretStr, model_validator

from rlm_adapters.core.events import Event
from rlm_adapters.core.lm.base import LMClient
from rlm_adapters.core.result import RLMResult
from rlm_adapters.core.rlm import RLM
from rlm_adapters.core.sandbox.base import FinalAnswer
from rlm_adapters.core.trajectory import RLMLogger
from rlm_adapters.errors import RLMError

# Backends configured by LangChain's standard parameters (model, temperature, api_key, ...).
SDK_BACKENDS = frozenset({"openai", "anthropic", "vllm", "openrouter"})
PROGRESS_EVENT = "rlm_progress"
EVENT_FIELD_CHARS = 1_000  # custom events are for progress displays, not for the full texts
QUOTED_QUESTION_CHARS = 4_000
ANSWER_CHUNK_CHARS = 1_000
_DONE = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(message.type, message.type)


def conversation_to_context(messages: Sequence[BaseMessage]) -> tuple[Any, str, str | None]:
    """Split a conversation into the RLM's context, the root model's question and its instructions.

    One human message becomes its text; several messages become ``[{"role", "content"}, ...]``.
    System messages become instructions; the question asks for an answer to the last human message.
    """
    system = [m.text for m in messages if isinstance(m, SystemMessage) and m.text]
    rest = [m for m in messages if not isinstance(m, SystemMessage)]
    humans = [m for m in rest if isinstance(m, HumanMessage)]
    if not humans:
        raise ValueError("ChatRLM needs at least one human message to answer")
    last = str(humans[-1].text)
    if len(rest) == 1:
        context: Any = last
        where = "`context` is the user's message (a string)"
    else:
        context = [{"role": _role(m), "content": m.text} for m in rest]
        where = "`context` is the conversation so far (a list of {'role', 'content'} dicts)"
    if len(last) <= QUOTED_QUESTION_CHARS:
        quoted = last
    else:
        # Long messages usually hold a document with the request before or after it: show both ends.
        half = QUOTED_QUESTION_CHARS // 2
        quoted = f"{last[:half]}\n[... {len(last) - 2 * half:,} characters only in `context` ...]\n{last[-half:]}"
    query = f"{where}. Answer the user's last message, using the data in `context`. It reads:\n\n{quoted}"
    return context, query, "\n\n".join(system) or None


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > EVENT_FIELD_CHARS:
        return f"{value[:EVENT_FIELD_CHARS]}... [+{len(value) - EVENT_FIELD_CHARS} chars]"
    if isinstance(value, list):
        return [_cut(v) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v) for k, v in value.items()}
    return value


def event_payload(event: Event) -> dict[str, Any]:
    """An engine event as the data of a ``rlm_progress`` custom event (long texts cut)."""
    return {key: _cut(value) for key, value in event.to_dict().items()}


class _RunCapture(BaseCallbackHandler):
    """Learns the chat model run's id: `stream` / `astream` call `_stream` without a run manager."""

    run_inline = True

    def __init__(self, callbacks: Callbacks) -> None:
        self.callbacks = callbacks
        self.run_id: UUID | None = None

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if self.run_id is None:
            self.run_id = run_id


_CAPTURE: contextvars.ContextVar[_RunCapture | None] = contextvars.ContextVar("rlm_run_capture", default=None)


def _capturing(config: RunnableConfig | None) -> tuple[RunnableConfig, _RunCapture]:
    config = ensure_config(config)
    callbacks = config.get("callbacks")
    capture = _RunCapture(callbacks)
    if callbacks is None:
        merged: Callbacks = [capture]
    elif isinstance(callbacks, list):
        merged = [*callbacks, capture]
    else:
        merged = callbacks.copy()
        merged.add_handler(capture, inherit=False)
    return {**config, "callbacks": merged}, capture


def _manager(
    run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None,
) -> tuple[Any, UUID | None]:
    """The handlers and run id progress events go to: this chat model's own run."""
    if run_manager is not None:
        args = {
            "handlers": run_manager.handlers,
            "parent_run_id": run_manager.parent_run_id,
            "tags": run_manager.tags,
            "metadata": run_manager.metadata,
        }
        return args, run_manager.run_id
    capture = _CAPTURE.get()
    if capture is None or capture.run_id is None:
        return None, None
    return {"handlers": CallbackManager.configure(capture.callbacks).handlers}, capture.run_id


def _progress(run_manager: CallbackManagerForLLMRun | None, event: Event) -> None:
    args, run_id = _manager(run_manager)
    if args is not None:
        CallbackManager(**args).on_custom_event(PROGRESS_EVENT, event_payload(event), run_id=run_id)


async def _aprogress(run_manager: AsyncCallbackManagerForLLMRun | None, event: Event) -> None:
    args, run_id = _manager(run_manager)
    if args is not None:
        await AsyncCallbackManager(**args).on_custom_event(PROGRESS_EVENT, event_payload(event), run_id=run_id)


def schema_problems(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], where: str = "value") -> list[str]:
    """What is wrong with `value` under a JSON schema (the subset pydantic and TypedDicts produce)."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        schema = {
            **root.get("$defs", root.get("definitions", {})).get(name, {}),
            **{k: v for k, v in schema.items() if k != "$ref"},
        }
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        if any(not schema_problems(value, option, root, where) for option in options):
            return []
        return [f"{where}={value!r:.80} matches none of the allowed types"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}={value!r:.80} is not one of {schema['enum']!r}"]
    expected = schema.get("type")
    types = expected if isinstance(expected, list) else [expected] if expected else []
    if types and not any(_is_type(value, t) for t in types):
        return [f"{where} should be {' or '.join(types)}, got {type(value).__name__} {value!r:.80}"]
    problems: list[str] = []
    if isinstance(value, dict):
        problems += [f"{where} is missing the required key {k!r}" for k in schema.get("required", []) if k not in value]
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                problems += schema_problems(value[key], sub, root, f"{where}[{key!r}]")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            problems += schema_problems(item, schema["items"], root, f"{where}[{index}]")
    return problems


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    kinds = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}
    return isinstance(value, kinds.get(name, object))


def structured_instructions(schema: Mapping[str, Any]) -> str:
    """What the root model is told when the answer must match `schema`."""
    return (
        "The final answer must be a JSON value matching this JSON schema:\n```json\n"
        f"{json.dumps(schema, indent=1)}\n```\nBuild it in the REPL as a Python value (for example "
        '`answer = {...}` with exactly the schema\'s keys), then finish with `FINAL_VAR("answer")`. Do not '
        "finish with prose."
    )


def final_validator(schema: Mapping[str, Any]) -> Any:
    """A `final_validator` for the engine: None when the final value matches `schema`, else the problem."""

    def check(final: FinalAnswer) -> str | None:
        value = final.value
        if value is None:
            try:
                value = json.loads(final.text)
            except ValueError:
                return "the answer is not a JSON value: build it as a Python dict or list and use FINAL_VAR"
        problems = schema_problems(value, schema, schema)
        return "; ".join(problems[:5]) or None

    return check


class ChatRLM(BaseChatModel):
    """A Recursive Language Model behind LangChain's chat model interface.

    The messages are not sent to a model: they become the variable `context` of a sandboxed Python
    REPL (one human message as its text, several as a list of ``{"role", "content"}``), system messages
    become instructions, and the root model answers the last human message by writing code and calling
    sub-models. While a run works, every engine event is dispatched as a LangChain custom event named
    ``rlm_progress`` (see `astream_events` / `on_custom_event`); the answer then streams as message
    chunks, the last one with ``chunk_position="last"``, usage over all depths and response metadata.

    Tool calling is not offered: `bind_tools` raises `NotImplementedError`. Use `RLMTool` to give an
    RLM to an agent, or `with_structured_output` for typed answers.

    Example:
        ```python
        llm = ChatRLM(model="gpt-5-mini", environment="subprocess", max_depth=1)
        chain = prompt | llm | StrOutputParser()
        ```

    Args:
        model: The root model's name for SDK backends (``openai``, ``anthropic``, ``vllm``, ``openrouter``).
        temperature: Sampling temperature of every model call (SDK backends).
        max_tokens: Output token cap of every model call (SDK backends).
        timeout: Seconds per model request (SDK backends); the whole run's cap is `run_timeout`.
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
        environment: The sandbox kind (``subprocess``, ``local``, ``docker``, ``e2b``).
        environment_kwargs: Sandbox options.
        max_depth: Recursion depth (0: no sub-calls, 1: `llm_query`, 2: nested RLMs).
        max_iterations: Root turns per run level.
        max_root_tokens: Token cap of the top-level root model.
        max_sub_tokens: Token cap of all other calls together.
        max_cost: Money cap of a run.
        run_timeout: Wall-clock seconds per run.
        max_sub_calls: Cap on the number of sub-calls of a run.
        max_concurrency: Model calls in flight per model within one run (``batch`` takes LangChain's own
            ``max_concurrency`` from its config for the number of runs).
        logger: Writes a JSONL trajectory per run (its path is in ``response_metadata``).
        prices: Extra prices, ``{"model": (usd_per_mtok_in, usd_per_mtok_out)}``.
    """

    model_config = ConfigDict(populate_by_name=True, protected_namespaces=(), arbitrary_types_allowed=True)

    model_name: str | None = Field(default=None, alias="model")
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float | None = None
    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    max_retries: int | None = None
    streaming: bool = False
    api_key: SecretStr | None = None
    base_url: str | None = None
    root_model: BaseChatModel | None = None
    sub_model: BaseChatModel | None = None
    backend: str | LMClient = "openai"
    backend_kwargs: dict[str, Any] = Field(default_factory=dict)
    other_backends: list[str | LMClient] = Field(default_factory=list)
    other_backend_kwargs: list[dict[str, Any]] | None = None
    environment: str = "subprocess"
    environment_kwargs: dict[str, Any] = Field(default_factory=dict)
    max_depth: int = 1
    max_iterations: int = 30
    max_root_tokens: int = 1_000_000
    max_sub_tokens: int = 1_000_000
    max_cost: float | None = None
    run_timeout: float | None = None
    max_sub_calls: int | None = None
    max_concurrency: int = 32
    logger: RLMLogger | None = None
    prices: dict[str, tuple[float, float]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_engine(self) -> ChatRLM:
        # Build the engine once so a missing key, model or bad limit fails here, not at the first call.
        self._engine()
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
            from rlm_adapters.core.lm.langchain_client import chat_model_name

            return chat_model_name(self.root_model)
        if isinstance(self.backend, LMClient):
            return self.backend.model_name
        return str(self.model_name or self.backend_kwargs.get("model_name") or self.backend)

    # -- the engine -----------------------------------------------------------------------------------
    def _sdk_kwargs(self, kwargs: Mapping[str, Any], model: str | None) -> dict[str, Any]:
        out = dict(kwargs)
        standard = {
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "timeout": self.timeout,
            "max_retries": self.max_retries,
            "base_url": self.base_url,
            "api_key": self.api_key.get_secret_value() if self.api_key else None,
        }
        out.update({k: v for k, v in standard.items() if v is not None and k not in out})
        if model:
            out["model_name"] = model
        return out

    def _engine(self, model_override: str | None = None) -> RLM:
        """A fresh `RLM` configured from this model (cheap: clients are built per run anyway)."""
        backend: str | LMClient
        if self.root_model is not None:
            backend, backend_kwargs = "langchain", {"model": self.root_model}
        elif self.backend in SDK_BACKENDS:
            backend = self.backend
            backend_kwargs = self._sdk_kwargs(self.backend_kwargs, model_override or self.model_name)
        else:
            backend, backend_kwargs = self.backend, dict(self.backend_kwargs)
        if self.sub_model is not None:
            others: list[str | LMClient] = ["langchain"]
            other_kwargs: list[dict[str, Any]] = [{"model": self.sub_model}]
        else:
            others = list(self.other_backends)
            given = self.other_backend_kwargs or [{} for _ in others]
            other_kwargs = [
                self._sdk_kwargs(k, None) if b in SDK_BACKENDS else dict(k) for b, k in zip(others, given, strict=False)
            ]
        return RLM(
            backend=backend,
            backend_kwargs=backend_kwargs,
            other_backends=others,
            other_backend_kwargs=other_kwargs,
            environment=self.environment,
            environment_kwargs=self.environment_kwargs,
            max_depth=self.max_depth,
            max_iterations=self.max_iterations,
            max_root_tokens=self.max_root_tokens,
            max_sub_tokens=self.max_sub_tokens,
            max_cost=self.max_cost,
            timeout=self.run_timeout,
            max_concurrency=self.max_concurrency,
            max_sub_calls=self.max_sub_calls,
            logger=self.logger,
            prices=self.prices,
        )

    async def _aevents(
        self, messages: list[BaseMessage], kwargs: dict[str, Any], cancel: asyncio.Event | None = None
    ) -> AsyncIterator[Event | RLMResult]:
        """Run one RLM, yielding its events as they happen and then its result."""
        if kwargs.get("tools") or kwargs.get("functions"):
            raise NotImplementedError("ChatRLM does not support tool calling; give the RLM to an agent as RLMTool")
        context, query, instructions = conversation_to_context(messages)
        schema = kwargs.get("rlm_output_schema")
        validator = None
        if schema is not None:
            instructions = "\n\n".join(filter(None, [instructions, structured_instructions(schema)]))
            validator = final_validator(schema)
        engine = self._engine(kwargs.get("model"))
        events: asyncio.Queue[Event] = asyncio.Queue()
        task = asyncio.create_task(
            engine.acompletion(
                context,
                query,
                callbacks=[events.put],
                cancel_event=cancel,
                instructions=instructions,
                final_validator=validator,
            )
        )
        try:
            while True:
                getter = asyncio.ensure_future(events.get())
                done, _ = await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    continue
                getter.cancel()
                while not events.empty():
                    yield events.get_nowait()
                yield task.result()
                return
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _events(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> Iterator[Event | RLMResult]:
        """`_aevents` for sync code, also inside a running event loop: the run gets a private thread."""
        items: queue.Queue[Any] = queue.Queue()
        control: dict[str, Any] = {}

        async def pump() -> None:
            control["loop"], control["cancel"] = asyncio.get_running_loop(), asyncio.Event()
            try:
                async for item in self._aevents(messages, kwargs, control["cancel"]):
                    items.put(item)
            except BaseException as exc:
                items.put(_Failure(exc))
            finally:
                items.put(_DONE)

        context = contextvars.copy_context()
        thread = threading.Thread(target=context.run, args=(asyncio.run, pump()), name="chat-rlm", daemon=True)
        thread.start()
        try:
            while (item := items.get()) is not _DONE:
                if isinstance(item, _Failure):
                    raise item.error
                yield item
        finally:
            if thread.is_alive() and "loop" in control:
                # The caller stopped early: cancel the run (its sandbox closes) and wait for the thread.
                control["loop"].call_soon_threadsafe(control["cancel"].set)
            thread.join()

    # -- results ----------------------------------------------------------------------------------------
    def _answer(self, result: RLMResult, stop: list[str] | None, kwargs: dict[str, Any]) -> str:
        if kwargs.get("rlm_output_schema") is not None:
            if result.finish_reason != "final":
                raise OutputParserException(
                    f"ChatRLM could not produce a value matching the schema ({result.finish_reason}): {result.error}"
                )
            value = result.final_value
            if value is None:
                value = json.loads(result.response)
            return json.dumps(value)
        if result.finish_reason == "error":
            raise RLMError(f"the RLM run failed: {result.error}")
        text = result.response
        for sequence in stop or self.stop or []:
            if sequence and sequence in text:
                text = text[: text.index(sequence)]
        return text

    def _metadata(self, result: RLMResult) -> tuple[UsageMetadata, dict[str, Any]]:
        total = result.usage_summary.total
        usage = UsageMetadata(
            input_tokens=total.input_tokens,
            output_tokens=total.output_tokens,
            total_tokens=total.total_tokens,
        )
        response = {
            "model_name": str(result.metadata.get("root_model", self._root_name(None))),
            "finish_reason": result.finish_reason,
            "cost": result.cost,
            "iterations": result.iterations,
            "trajectory_file": str(result.trajectory_file) if result.trajectory_file else None,
            "run_id": result.run_id,
            "usage": result.usage_summary.to_dict(),
        }
        return usage, response

    def _chunks(self, result: RLMResult, stop: list[str] | None, kwargs: dict[str, Any]) -> list[ChatGenerationChunk]:
        text = self._answer(result, stop, kwargs)
        size = len(text) if kwargs.get("rlm_output_schema") is not None else ANSWER_CHUNK_CHARS
        pieces = [text[i : i + size] for i in range(0, len(text), max(size, 1))] or [""]
        usage, response = self._metadata(result)
        chunks = [ChatGenerationChunk(message=AIMessageChunk(content=p)) for p in pieces[:-1]]
        last = AIMessageChunk(
            content=pieces[-1], usage_metadata=usage, response_metadata=response, chunk_position="last"
        )
        return [*chunks, ChatGenerationChunk(message=last)]

    def _result(self, result: RLMResult, stop: list[str] | None, kwargs: dict[str, Any]) -> ChatResult:
        usage, response = self._metadata(result)
        message = AIMessage(
            content=self._answer(result, stop, kwargs), usage_metadata=usage, response_metadata=response
        )
        return ChatResult(
            generations=[ChatGeneration(message=message)], llm_output={"model_name": response["model_name"]}
        )

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
    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result: RLMResult | None = None
        async for item in self._aevents(messages, kwargs):
            if isinstance(item, RLMResult):
                result = item
            else:
                await _aprogress(run_manager, item)
        assert result is not None
        if run_manager is not None and super()._should_stream(async_api=True, run_manager=run_manager):
            for chunk in self._chunks(result, stop, kwargs):
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        return self._result(result, stop, kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result: RLMResult | None = None
        for item in self._events(messages, kwargs):
            if isinstance(item, RLMResult):
                result = item
            else:
                _progress(run_manager, item)
        assert result is not None
        if run_manager is not None and super()._should_stream(async_api=False, run_manager=run_manager):
            for chunk in self._chunks(result, stop, kwargs):
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        return self._result(result, stop, kwargs)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        result: RLMResult | None = None
        async for item in self._aevents(messages, kwargs):
            if isinstance(item, RLMResult):
                result = item
            else:
                await _aprogress(run_manager, item)
        assert result is not None
        for chunk in self._chunks(result, stop, kwargs):
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
        result: RLMResult | None = None
        for item in self._events(messages, kwargs):
            if isinstance(item, RLMResult):
                result = item
            else:
                _progress(run_manager, item)
        assert result is not None
        for chunk in self._chunks(result, stop, kwargs):
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        """LangChain's `stream`, with this run's id made known to the progress events."""
        config, capture = _capturing(config)
        token = _CAPTURE.set(capture)
        try:
            yield from super().stream(input, config, stop=stop, **kwargs)
        finally:
            with contextlib.suppress(ValueError):  # closed from another context: nothing to restore
                _CAPTURE.reset(token)

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        """LangChain's `astream`, with this run's id made known to the progress events."""
        config, capture = _capturing(config)
        token = _CAPTURE.set(capture)
        try:
            async for chunk in super().astream(input, config, stop=stop, **kwargs):
                yield chunk
        finally:
            with contextlib.suppress(ValueError):
                _CAPTURE.reset(token)

    # -- structured output -------------------------------------------------------------------------------
    def with_structured_output(
        self, schema: dict[str, Any] | type, *, include_raw: bool = False, **kwargs: Any
    ) -> Runnable[LanguageModelInput, Any]:
        """Answer with a value matching `schema` (a pydantic model, a TypedDict or a JSON schema).

        The root model is asked to build the value in the REPL and finish with ``FINAL_VAR``; it is
        validated there, an invalid value goes back to the model once, and a second failure raises
        `OutputParserException`. ``method`` and ``strict`` are accepted for compatibility and ignored:
        there is one method.

        Args:
            schema: The output schema.
            include_raw: Return ``{"raw", "parsed", "parsing_error"}`` instead of the parsed value.
            **kwargs: ``method`` / ``strict`` (ignored).
        """
        method = kwargs.pop("method", None) or "json_schema"
        kwargs.pop("strict", None)
        if kwargs:
            raise ValueError(f"with_structured_output got unsupported arguments {kwargs!r}")
        json_schema = convert_to_json_schema(schema)
        llm = self.bind(
            ls_structured_output_format={"kwargs": {"method": method}, "schema": schema},
            rlm_output_schema=json_schema,
        )
        model_class = schema if isinstance(schema, type) and is_basemodel_subclass(schema) else None

        def parse(message: BaseMessage) -> Any:
            value = json.loads(message.text)
            if model_class is None:
                return value
            # pydantic 2 models validate with `model_validate`, the v1 shim with `parse_obj`.
            validate = getattr(model_class, "model_validate", None) or cast(Any, model_class).parse_obj
            return validate(value)

        parser = RunnableLambda(parse, name="parse_rlm_output")
        if not include_raw:
            return llm | parser
        assign = RunnablePassthrough.assign(parsed=lambda d: parse(d["raw"]), parsing_error=lambda _: None)
        fallback = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | assign.with_fallbacks([fallback], exception_key="parsing_error")


def __getattr__(name: str) -> Any:
    # `RLMTool` lives in its own module (it imports this one); offer it here too.
    if name == "RLMTool":
        from rlm_adapters.langchain_tool import RLMTool

        return RLMTool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["PROGRESS_EVENT", "ChatRLM", "RLMTool", "conversation_to_context", "event_payload"]  # noqa: F822
