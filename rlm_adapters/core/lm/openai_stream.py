"""A Chat Completions reply read as a stream, so that a call cut on the way still counts what had arrived.

Streamed, each piece of the reply is counted as it comes (`call_context.CallProgress`): a call that the run's
deadline, a budget or a cancellation ends half-way is billed for what the provider generated, and the engine
counts it too. Closing the stream tells the server to stop: llama.cpp and vLLM stop generating for a client
that left, while a request that was not streamed is generated to its end. The usage comes in the last chunk
(``stream_options={"include_usage": True}``); a stream that ends without a finish reason or usage was cut.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from rlm_adapters.core.lm._reply import field_of
from rlm_adapters.core.lm.call_context import call_progress
from rlm_adapters.errors import ModelError


@dataclass
class StreamedReply:
    """What a stream delivered: its content pieces, refusal, finish reason and usage."""

    pieces: list[Any] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    finish_reason: Any = None
    usage: Any = None

    def completion(self, source: str, model: str) -> dict[str, Any]:
        """The reply in a chat completion's shape (what the client's non-streamed path reads).

        Raises:
            ModelError: the stream ended with neither a finish reason nor usage (it was cut on the way).
        """
        if self.finish_reason is None and self.usage is None:
            raise ModelError(
                f"{source}: the stream ended before its reply was complete (no finish reason, no usage)", model=model
            )
        content: Any
        if all(isinstance(p, str) for p in self.pieces):
            content = "".join(self.pieces)
        elif len(self.pieces) == 1:
            content = self.pieces[0]  # as the one delta had it: read (or refused) as a whole reply's would be
        else:
            content = [part for p in self.pieces for part in (p if isinstance(p, list) else [p])]
        message = {"content": content if self.pieces else None, "refusal": "".join(self.refusal) or None}
        return {"choices": [{"message": message, "finish_reason": self.finish_reason}], "usage": self.usage}


async def read_stream(stream: Any) -> StreamedReply:
    """Read a Chat Completions stream to its end, counting each piece of text in the call's progress."""
    progress = call_progress()
    if progress is not None:
        progress.streamed = True
    reply = StreamedReply()
    try:
        async for chunk in stream:
            usage = field_of(chunk, "usage")
            if usage is not None:
                reply.usage = usage
                if progress is not None:
                    prompt = field_of(usage, "prompt_tokens")
                    progress.input_tokens = prompt if isinstance(prompt, int) else progress.input_tokens
            choices = field_of(chunk, "choices")
            if not isinstance(choices, list) or not choices:
                continue
            delta = field_of(choices[0], "delta")
            piece = field_of(delta, "content")
            if piece is not None:
                reply.pieces.append(piece)
                if progress is not None and isinstance(piece, str):
                    progress.received(piece)
            refusal = field_of(delta, "refusal")
            if isinstance(refusal, str):
                reply.refusal.append(refusal)
            reason = field_of(choices[0], "finish_reason")
            if reason is not None:
                reply.finish_reason = reason
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()  # a server generates for a client until the connection closes
    return reply


def whole_body(body: bytes) -> Any:
    """A reply that came whole though a stream was asked for: its JSON, or its text when it is not JSON (the
    client then names it as not a chat completion)."""
    try:
        return json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
