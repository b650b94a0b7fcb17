"""An RLM run's result as LangChain output: the answer text, its chunks, usage and response metadata."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult

from rlm_adapters.core import RLMResult
from rlm_adapters.core.adapter_kit import jsonable
from rlm_adapters.errors import RLMRunFailed
from rlm_adapters.langchain._tool_calling import message_tool_calls, tool_call_chunks

ANSWER_CHUNK_CHARS = 1_000


def answer_text(result: RLMResult, stop: list[str] | None, kwargs: dict[str, Any]) -> str:
    """The answer: the value as JSON for structured output, else the response cut at the first stop sequence.

    Args:
        result: The finished run.
        stop: The stop sequences in force (the call's, else the model's).
        kwargs: The call's keyword arguments (``rlm_output_schema`` asks for structured output).

    Raises:
        RLMRunFailed: The run failed (without structured output: with it, the message carries the last value
            and its ``finish_reason``, and the structured-output parser raises).
    """
    if kwargs.get("rlm_output_schema") is not None:
        if result.value is not None:
            return json.dumps(jsonable(result.value))
        if result.final_value is not None:
            return json.dumps(result.final_value)
        return result.response
    if result.failed:
        raise RLMRunFailed(result)
    text = result.response
    for sequence in stop or []:
        if sequence and sequence in text:
            text = text[: text.index(sequence)]
    return text


def result_metadata(result: RLMResult, model_name: str) -> tuple[UsageMetadata, dict[str, Any]]:
    """The usage over all depths and the response metadata of a run.

    Args:
        result: The finished run.
        model_name: The root model's name, when the run's metadata does not name it.
    """
    total = result.usage_summary.total
    usage = UsageMetadata(
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        total_tokens=total.total_tokens,
    )
    response = {
        "model_name": str(result.metadata.get("root_model", model_name)),
        "finish_reason": result.finish_reason,
        "cost": result.cost,
        "iterations": result.iterations,
        "trajectory_file": str(result.trajectory_file) if result.trajectory_file else None,
        "run_id": result.run_id,
        "error": result.error,
        "usage": result.usage_summary.to_dict(),
        "sources": [source.to_dict() for source in result.sources],
        "claims": [claim.to_dict() for claim in result.claims],
        "sources_note": result.sources_note,
        # Which route answered (one plain call, or the RLM) and why: the prompt's tokens against the threshold.
        "route": result.metadata.get("route", "rlm"),
        "route_reason": result.metadata.get("route_reason"),
    }
    resumed = result.resumed()
    if resumed is not None:  # calls replayed from the call cache: said, never silent
        response["resumed"] = resumed
    return usage, response


def answer_message(result: RLMResult, text: str, usage: UsageMetadata, response: dict[str, Any]) -> AIMessage:
    """The answer as one `AIMessage`, with the run's calls of the caller's tools.

    Args:
        result: The finished run (its ``tool_calls`` / ``invalid_tool_calls``).
        text: The answer text.
        usage: The run's usage.
        response: The run's response metadata.
    """
    calls, invalid = message_tool_calls(result)
    return AIMessage(
        content=text, tool_calls=calls, invalid_tool_calls=invalid, usage_metadata=usage, response_metadata=response
    )


def answer_chunks(
    result: RLMResult,
    text: str,
    structured: bool,
    usage: UsageMetadata,
    response: dict[str, Any],
    streamed: str = "",
) -> list[ChatGenerationChunk]:
    """The answer as stream chunks: its text (what `streamed` did not already give), then one chunk per tool
    call (``tool_call_chunks``); the last carries the usage, the metadata and ``chunk_position="last"``.

    Args:
        result: The finished run (its tool calls).
        text: The answer.
        structured: A JSON value, sent whole rather than in pieces.
        usage: The run's usage.
        response: The run's response metadata (invalid tool calls are added to the last chunk's).
        streamed: The answer's beginning, already streamed as the model wrote it (the direct route).
    """
    if streamed:
        # What was streamed cannot be taken back: only the rest follows (nothing, when the answer differs).
        text = text[len(streamed) :] if text.startswith(streamed) else ""
    size = len(text) if structured else ANSWER_CHUNK_CHARS
    pieces = [text[i : i + size] for i in range(0, len(text), max(size, 1))] or [""]
    messages = [AIMessageChunk(content=p) for p in pieces]
    messages += [AIMessageChunk(content="", tool_call_chunks=[call]) for call in tool_call_chunks(result)]
    if result.invalid_tool_calls:
        response = {**response, "invalid_tool_calls": [c.to_dict() for c in result.invalid_tool_calls]}
    last = messages.pop()
    final = AIMessageChunk(
        content=last.content,
        tool_call_chunks=last.tool_call_chunks,
        usage_metadata=usage,
        response_metadata=response,
        chunk_position="last",
    )
    return [ChatGenerationChunk(message=m) for m in [*messages, final]]


def chat_result(message: AIMessage) -> ChatResult:
    """The answer message as a `ChatResult` of one generation."""
    model_name = message.response_metadata["model_name"]
    return ChatResult(generations=[ChatGeneration(message=message)], llm_output={"model_name": model_name})
