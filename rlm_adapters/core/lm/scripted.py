"""A scripted model for tests and examples, like pydantic-ai's `FunctionModel`.

Give it a function of the conversation, or a list of replies played in order::

    def root(messages: list[Message]) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        return ['```repl\\nprint(len(context))\\n```', 'FINAL(done)'][turn]

    ScriptedModel(root)
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
from collections.abc import Awaitable, Callable, Sequence

from rlm_adapters.core.lm.base import LMResponse, Message, ModelClient
from rlm_adapters.core.lm.call_context import reply_cap
from rlm_adapters.core.tokens import estimate_tokens

Reply = str | LMResponse
ReplyFunction = Callable[[list[Message]], Reply] | Callable[[list[Message]], Awaitable[Reply]]


class ScriptedModel(ModelClient):
    """A model whose replies come from a function or a list.

    Token counts are estimated from the text (about four characters a token) unless the function
    returns an `LMResponse` with its own counts. Like a real model, a text reply longer than the run's
    ``max_reply_tokens`` is cut there and flagged (`LMResponse.truncated`).

    Args:
        replies: A function of the message list (sync or async), or a sequence of replies played in order
            (the last one repeats once the list is used up).
        model_name: The name the calls are accounted under.
        latency: Seconds to wait before each reply (to exercise concurrency).
    """

    backend = "scripted"

    def __init__(
        self, replies: ReplyFunction | Sequence[Reply], *, model_name: str = "scripted", latency: float = 0.0
    ) -> None:
        self._model_name = model_name
        self.latency = latency
        self.calls: list[list[Message]] = []
        self._lock = threading.Lock()
        if callable(replies):
            self._fn: ReplyFunction = replies
        else:
            items = list(replies)
            if not items:
                raise ValueError("ScriptedModel needs at least one reply")
            counter = itertools.count()

            def play(_messages: list[Message]) -> Reply:
                return items[min(next(counter), len(items) - 1)]

            self._fn = play

    @property
    def model_name(self) -> str:
        """The name the calls are accounted under."""
        return self._model_name

    def cache_identity(self) -> dict[str, str]:
        """A scripted model is known by its name: its replies are a function of the messages."""
        return {"backend": "scripted", "model": self._model_name}

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """Reply to `messages` with the scripted text."""
        with self._lock:
            self.calls.append([dict(m) for m in messages])  # type: ignore[misc]
        if self.latency:
            await asyncio.sleep(self.latency)
        reply = self._fn(messages)
        if inspect.isawaitable(reply):
            reply = await reply
        if isinstance(reply, LMResponse):
            return reply
        prompt_chars = sum(len(m["content"]) for m in messages)
        text, cap = str(reply), reply_cap()
        truncated = cap is not None and estimate_tokens(text) > cap
        if cap is not None and truncated:
            text = text[: cap * 4]
        return LMResponse(
            text=text,
            input_tokens=max(1, prompt_chars // 4),
            output_tokens=estimate_tokens(text),
            model=self._model_name,
            truncated=truncated,
        )

    async def aclose(self) -> None:
        """Nothing to release."""
