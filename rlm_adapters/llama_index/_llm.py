"""`RLMFunctionCallingLLM`: an RLM as a LlamaIndex LLM with tool calling, an agent's own model.

The chat messages are not sent to a model: they become the REPL's `context` (a list of ``{"role",
"content"}`` entries, tool calls and results with their fields), system messages become instructions, and
the root model answers the last user message by writing code, or ends its turn by calling the agent's
tools (``call_tool(...)`` / a ``CALL_TOOL`` line), which come back as the response's `ToolCallBlock`s. So
`FunctionAgent` and the other LlamaIndex agents can run on an RLM: the conversation, tool results
included, stays in the REPL, never in the root model's prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.callbacks import CallbackManager
from llama_index.core.instrumentation.span import active_span_id
from llama_index.core.llms import LLM
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools.types import BaseTool
from pydantic import Field, PrivateAttr

from rlm_adapters.core import RLM, RLMResult
from rlm_adapters.core.adapter_kit import iter_sync, run_sync
from rlm_adapters.errors import RLMRunFailed
from rlm_adapters.hosting import conversation_input
from rlm_adapters.llama_index._options import rlm_from
from rlm_adapters.llama_index._query_engine import _chunks, _forwarder

# What agents' memories may keep of a conversation for this LLM: the REPL holds it, not a prompt.
CONTEXT_WINDOW = 10_000_000


class RLMFunctionCallingLLM(FunctionCallingLLM):
    """A Recursive Language Model as a LlamaIndex LLM that calls tools (``is_function_calling_model``).

    Each call is one RLM run over the conversation: tools given to `chat_with_tools` (as `FunctionAgent`
    does) are offered to the root model, whose calls are checked against each tool's schema (a bad one
    goes back to it to mend) and returned as `ToolCallBlock`s; `get_tool_calls_from_response` reads them.

    Example:
        ```python
        llm = RLMFunctionCallingLLM(llm=OpenAI(model="gpt-5-mini"), environment="subprocess")
        agent = FunctionAgent(tools=[search], llm=llm)
        ```

    Args:
        llm: A LlamaIndex LLM for the root model (else give ``backend`` / ``backend_kwargs``).
        sub_llm: A LlamaIndex LLM for the sub-models (else ``other_backends``; else the root model).
        rlm: A ready `RLM` instead of the options.
        context_window: The window announced in `metadata`, which sizes agents' default memories: the
            conversation lives in the REPL, so it may be far longer than any model's.
        callback_manager: LlamaIndex's legacy callback manager.
        **rlm_options: Any `RLM` option (``backend``, ``environment``, ``max_depth``, ``logger``, ...).
    """

    context_window: int = Field(default=CONTEXT_WINDOW, gt=0, description="The window announced in metadata.")
    _rlm: RLM = PrivateAttr()

    def __init__(
        self,
        llm: LLM | None = None,
        sub_llm: LLM | None = None,
        *,
        rlm: RLM | None = None,
        context_window: int = CONTEXT_WINDOW,
        callback_manager: CallbackManager | None = None,
        **rlm_options: Any,
    ) -> None:
        super().__init__(context_window=context_window, callback_manager=callback_manager or CallbackManager([]))
        if rlm is not None and (llm is not None or sub_llm is not None or rlm_options):
            raise ValueError("give either rlm= or the RLM's options (llm=, sub_llm=, backend=, ...), not both")
        self._rlm = rlm if rlm is not None else rlm_from(llm, sub_llm, rlm_options)

    @classmethod
    def class_name(cls) -> str:
        return "RLMFunctionCallingLLM"

    @property
    def rlm(self) -> RLM:
        """The engine behind this LLM."""
        return self._rlm

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=self._rlm.root_model_name,
        )

    # -- one run per call ---------------------------------------------------------------------------
    async def _arun(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        options = _tool_options(kwargs)
        system = [m.content for m in messages if m.role == MessageRole.SYSTEM and m.content]
        entries = [message_entry(m) for m in messages if m.role != MessageRole.SYSTEM]
        context, query = conversation_input(entries)
        result = await self._rlm.acompletion(
            context,
            query,
            instructions="\n\n".join(system) or None,
            callbacks=[_forwarder(active_span_id.get())],
            **options,
        )
        return chat_response(result)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await self._arun(messages, kwargs)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return run_sync(self._arun(messages, kwargs))

    async def _responses(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponseAsyncGen:
        for response in streamed(await self._arun(messages, kwargs)):
            yield response

    async def _completions(self, prompt: str, kwargs: dict[str, Any]) -> CompletionResponseAsyncGen:
        response = await self._arun([ChatMessage(role=MessageRole.USER, content=prompt)], kwargs)
        text = ""
        for piece in _chunks(response.message.content or ""):
            text += piece
            yield CompletionResponse(text=text, delta=piece)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        return self._responses(messages, kwargs)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return iter_sync(self._responses(messages, kwargs))

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        response = await self._arun([ChatMessage(role=MessageRole.USER, content=prompt)], kwargs)
        return CompletionResponse(text=response.message.content or "", raw=response.raw)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        response = run_sync(self._arun([ChatMessage(role=MessageRole.USER, content=prompt)], kwargs))
        return CompletionResponse(text=response.message.content or "", raw=response.raw)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        return self._completions(prompt, kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        return iter_sync(self._completions(prompt, kwargs))

    # -- tools --------------------------------------------------------------------------------------
    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            messages.append(ChatMessage(role=MessageRole.USER, content=user_msg))
        elif user_msg is not None:
            messages.append(user_msg)
        choice = kwargs.pop("tool_choice", None)
        if tool_required and choice in (None, "auto"):
            choice = "required"
        return {
            "messages": messages,
            "tools": [tool.metadata.to_openai_tool() for tool in tools],
            "tool_choice": choice,
            "parallel_tool_calls": allow_parallel_tool_calls,
            **kwargs,
        }

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The response's calls of the agent's tools (its `ToolCallBlock`s).

        Raises:
            ValueError: There is none and `error_on_no_tool_call` is set.
        """
        calls = [
            ToolSelection(
                tool_id=block.tool_call_id or "",
                tool_name=block.tool_name,
                tool_kwargs=block.tool_kwargs if isinstance(block.tool_kwargs, dict) else {},
            )
            for block in response.message.blocks
            if isinstance(block, ToolCallBlock)
        ]
        if not calls and error_on_no_tool_call:
            raise ValueError(f"the RLM answered without a tool call: {(response.message.content or '')[:200]!r}")
        return calls


def message_entry(message: ChatMessage) -> dict[str, Any]:
    """One LlamaIndex message as an entry of `context`, with a tool call's or a tool result's fields."""
    role = message.role.value if isinstance(message.role, MessageRole) else str(message.role)
    entry: dict[str, Any] = {"role": role, "content": message.content or ""}
    calls = [
        {"id": block.tool_call_id, "name": block.tool_name, "args": _arguments(block.tool_kwargs)}
        for block in message.blocks
        if isinstance(block, ToolCallBlock)
    ]
    if calls:
        entry["tool_calls"] = calls
    if message.role == MessageRole.TOOL:
        entry["tool_call_id"] = message.additional_kwargs.get("tool_call_id")
        name = message.additional_kwargs.get("name") or message.additional_kwargs.get("tool_name")
        if name:
            entry["name"] = str(name)
    return entry


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _tool_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's tools as `RLM.acompletion` options (from `_prepare_chat_with_tools`)."""
    unknown = sorted(set(kwargs) - {"tools", "tool_choice", "parallel_tool_calls"})
    if unknown:
        raise ValueError(f"RLMFunctionCallingLLM got unsupported arguments {unknown}")
    if not kwargs.get("tools"):
        return {}
    choice = kwargs.get("tool_choice")
    if isinstance(choice, dict):  # OpenAI's {"type": "function", "function": {"name": ...}}
        choice = (choice.get("function") or {}).get("name") or choice.get("type")
    return {
        "tools": kwargs["tools"],
        "tool_choice": "required" if choice == "any" else choice,
        "parallel_tool_calls": bool(kwargs.get("parallel_tool_calls", True)),
    }


def chat_response(result: RLMResult) -> ChatResponse:
    """A run's answer (and calls) as a `ChatResponse`; the run's summary is its ``raw``.

    Raises:
        RLMRunFailed: The run failed.
    """
    if result.failed:
        raise RLMRunFailed(result)
    blocks: list[Any] = [TextBlock(text=result.response)] if result.response else []
    blocks += [ToolCallBlock(tool_call_id=c.id, tool_name=c.name, tool_kwargs=c.args) for c in result.tool_calls]
    total = result.usage_summary.total
    return ChatResponse(
        message=ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks),
        raw=result.to_dict(),
        additional_kwargs={
            "prompt_tokens": total.input_tokens,
            "completion_tokens": total.output_tokens,
            "total_tokens": total.total_tokens,
        },
    )


def streamed(response: ChatResponse) -> list[ChatResponse]:
    """A response as stream chunks: its text piece by piece, the tool calls in the last chunk."""
    text = response.message.content or ""
    calls = [block for block in response.message.blocks if isinstance(block, ToolCallBlock)]
    pieces = _chunks(text) or [""]
    out: list[ChatResponse] = []
    so_far = ""
    for index, piece in enumerate(pieces):
        so_far += piece
        last = index == len(pieces) - 1
        blocks: list[Any] = [TextBlock(text=so_far)] if so_far else []
        message = ChatMessage(role=MessageRole.ASSISTANT, blocks=[*blocks, *(calls if last else [])])
        out.append(
            ChatResponse(
                message=message,
                delta=piece,
                raw=response.raw if last else None,
                additional_kwargs=response.additional_kwargs if last else {},
            )
        )
    return out
