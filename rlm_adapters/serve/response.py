"""A finished run as Chat Completions objects: the ``chat.completion``, its stream chunks, and the usage.

The answer is what the run returned, cut before the first stop sequence and at ``max_completion_tokens``
(``finish_reason: "length"``); a typed answer (``response_format``) is its value as JSON text. ``usage``
counts every model call of the run at every depth (root and sub-models), each once. Beside OpenAI's fields
the objects carry ``rlm`` (the run's id, which is its trajectory id, cost, iterations, engine finish reason
and the sources its answer rests on), which every OpenAI client keeps as an extra field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from rlm_adapters.core import RLMResult
from rlm_adapters.core.adapter_kit import estimate_tokens, jsonable
from rlm_adapters.serve.errors import OpenAIError
from rlm_adapters.serve.request import ChatRequest

FinishReason = Literal["stop", "length", "tool_calls"]
CHUNK_CHARS = 1_000
# Engine finishes that end with the best partial answer: a limit ran out, as "length" says for one model.
LIMIT_FINISHES = frozenset({"max_iterations", "budget", "timeout"})


@dataclass(frozen=True)
class Answer:
    """What the client gets of a finished run.

    Attributes:
        text: The message's content (None with tool calls and no text).
        tool_calls: OpenAI tool calls (``{"id", "type", "function": {"name", "arguments"}}``).
        finish_reason: OpenAI's finish reason.
        usage: OpenAI's usage object.
        rlm: The run's own details (``run_id``, ``cost``, ``iterations``, ``finish_reason``, ``error``,
            ``sources``, ``sources_note``).
    """

    text: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: FinishReason
    usage: dict[str, Any]
    rlm: dict[str, Any]


def usage_of(result: RLMResult) -> dict[str, Any]:
    """OpenAI's usage object for every model call of the run (root and sub-models, every depth)."""
    total = result.usage_summary.total
    return {
        "prompt_tokens": total.input_tokens,
        "completion_tokens": total.output_tokens,
        "total_tokens": total.total_tokens,
        "prompt_tokens_details": {"cached_tokens": total.cache_read_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def answer_of(result: RLMResult, request: ChatRequest) -> Answer:
    """The client's answer of a finished run.

    Raises:
        OpenAIError: The run failed (500 ``server_error``, its error as the message), or a typed answer
            never matched its schema.
    """
    details = {
        "run_id": result.run_id,
        "finish_reason": result.finish_reason,
        "cost": round(result.cost, 8),
        "iterations": result.iterations,
        "calls": result.usage_summary.total.calls,
        "error": result.error,
        "sources": [{"location": s.location, "excerpt": s.excerpt} for s in result.sources],
        "sources_note": result.sources_note,
        "route": result.metadata.get("route", "rlm"),
        "route_reason": result.metadata.get("route_reason"),
    }
    if result.finish_reason == "error" or result.finish_reason == "cancelled":
        raise OpenAIError(
            500, f"the RLM run failed: {result.error or result.finish_reason}", "server_error", code="rlm_run_failed"
        )
    if result.tool_calls:
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.args, ensure_ascii=False)},
            }
            for call in result.tool_calls
        ]
        return Answer(result.response or None, calls, "tool_calls", usage_of(result), details)
    if request.output_schema is not None:
        if result.value is None and result.finish_reason == "final":
            raise OpenAIError(
                500,
                "the RLM's answer did not match response_format's schema",
                "server_error",
                code="rlm_invalid_output",
            )
        value = result.value if result.value is not None else result.final_value
        text = json.dumps(jsonable(value), ensure_ascii=False) if value is not None else result.response
        reason: FinishReason = "length" if result.finish_reason in LIMIT_FINISHES else "stop"
        return Answer(text, [], reason, usage_of(result), details)
    text = result.response
    for sequence in request.stop:
        if sequence in text:
            text = text[: text.index(sequence)]
    reason = "length" if result.finish_reason in LIMIT_FINISHES else "stop"
    if request.max_answer_tokens is not None and estimate_tokens(text) > request.max_answer_tokens:
        text = cut_to_tokens(text, request.max_answer_tokens)
        reason = "length"
    return Answer(text, [], reason, usage_of(result), details)


def cut_to_tokens(text: str, limit: int) -> str:
    """The longest start of `text` of at most `limit` tokens (as `estimate_tokens` counts), by bisection."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if estimate_tokens(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def completion(answer: Answer, completion_id: str, model: str, created: int | None = None) -> dict[str, Any]:
    """The ``chat.completion`` object."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None, "annotations": []}
    if answer.tool_calls:
        message["tool_calls"] = answer.tool_calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": answer.finish_reason}],
        "usage": answer.usage,
        "system_fingerprint": None,
        "rlm": answer.rlm,
    }


@dataclass(frozen=True)
class Chunks:
    """Makes the ``chat.completion.chunk`` objects of one stream (one id, one ``created``)."""

    completion_id: str
    model: str
    created: int
    include_usage: bool

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        """One chunk of the single choice."""
        data: dict[str, Any] = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self.include_usage:
            data["usage"] = None  # every chunk but the last one, as OpenAI sends them
        return data

    def first(self) -> dict[str, Any]:
        """The opening chunk: the assistant's role, sent before the run starts."""
        return self.chunk({"role": "assistant", "content": "", "refusal": None})

    def progress(self, text: str) -> dict[str, Any]:
        """A line of the run's progress, as a ``reasoning_content`` delta (shown as thinking by clients that
        show it; not part of the answer)."""
        return self.chunk({"reasoning_content": text})

    def answer(self, answer: Answer, streamed: str = "") -> Iterator[dict[str, Any]]:
        """The answer's chunks: its text in pieces (what `streamed`, the direct route's pieces already sent as
        the model wrote them, did not give), each tool call, the finish, then the usage if asked."""
        text = answer.text or ""
        if streamed:  # what was sent cannot be taken back: only the rest follows (nothing, when it differs)
            text = text[len(streamed) :] if text.startswith(streamed) else ""
        for start in range(0, len(text), CHUNK_CHARS):
            yield self.chunk({"content": text[start : start + CHUNK_CHARS]})
        for index, call in enumerate(answer.tool_calls):
            yield self.chunk({"tool_calls": [{"index": index, **call}]})
        last = self.chunk({}, answer.finish_reason)
        last["rlm"] = answer.rlm
        yield last
        if self.include_usage:
            yield {**self.chunk({}), "choices": [], "usage": answer.usage}
