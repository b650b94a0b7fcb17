"""Any LlamaIndex LLM as a root or sub model (``backend="llama_index", backend_kwargs={"llm": llm}``).

LlamaIndex wraps dozens of providers; adapting its `LLM` interface once gives the engine all of them.
Calls go through ``llm.achat`` so the LLM's own instrumentation (LlamaIndex spans and events) sees them.
``timeout`` bounds each whole call, and the run's deadline always does; the LLM reads its replies with its
own HTTP client, which belongs to the caller, so ``max_reply_bytes`` is checked on the reply's text once it is in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._http import DEFAULT_MAX_REPLY_BYTES
from rlm_adapters.core.lm._http import max_reply_bytes as _max_reply_bytes
from rlm_adapters.core.lm._reply import check_text_size, cut_at_cap, field_of, reading, reply_of, reply_text
from rlm_adapters.core.lm._reply import token_count as _token_count
from rlm_adapters.core.lm._retry import RetryPolicy
from rlm_adapters.core.lm.base import LMResponse, Message, ModelClient
from rlm_adapters.core.lm.deadline import bounded
from rlm_adapters.core.lm.reply_identity import wrapped_identity
from rlm_adapters.errors import ConfigurationError, ModelError

if TYPE_CHECKING:
    from llama_index.core.llms import LLM

_INPUT_KEYS = ("prompt_tokens", "input_tokens", "prompt_token_count")
_OUTPUT_KEYS = ("completion_tokens", "output_tokens", "candidates_token_count")


class LlamaIndexClient(ModelClient):
    """Adapts a LlamaIndex `LLM` to the engine's model protocol.

    Token usage is taken from what the LLM reports (``additional_kwargs`` or the raw provider response's
    ``usage``), and estimated from the text when it reports nothing.

    Args:
        llm: Any LlamaIndex LLM (``OpenAI``, ``Anthropic``, ``Ollama``, ``MockLLM``, a ``CustomLLM``...).
        model_name: The name for pricing, usage and ``llm_query(..., model=...)``; defaults to the LLM's
            ``metadata.model_name``, else its class name.
        timeout: Seconds one whole call may take (default 600).
        max_reply_bytes: The longest reply text accepted, in characters (default 32 MiB).

    Raises:
        ConfigurationError: when `llm` is not a LlamaIndex LLM.
    """

    backend = "llama_index"

    def __init__(
        self,
        llm: LLM,
        *,
        model_name: str | None = None,
        timeout: float = 600.0,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        llms = require("llama_index.core.llms", extra="llama-index", feature="backend='llama_index'")
        if not isinstance(llm, llms.LLM):
            raise ConfigurationError(
                f"backend='llama_index' needs backend_kwargs={{'llm': <a LlamaIndex LLM>}}, got {llm!r}"
            )
        self.llm = llm
        self._chat_message = llms.ChatMessage
        self._model_name = model_name or _llm_name(llm)
        limits = {"timeout": timeout, "max_reply_bytes": max_reply_bytes}
        self._timeout = RetryPolicy.from_kwargs("llama_index", limits).request_timeout
        self._max_reply_bytes = _max_reply_bytes("llama_index", limits)

    @property
    def model_name(self) -> str:
        """The name the calls are accounted under."""
        return self._model_name

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: the LLM's own settings (``to_dict``, without secrets)."""
        return wrapped_identity("llama_index", self._model_name, self.llm, self.llm.to_dict)

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """Send `messages` through ``llm.achat`` and return the reply with its token usage."""
        chat = [self._chat_message(role=m["role"], content=m["content"]) for m in messages]
        limit = bounded(self._timeout)
        try:
            async with asyncio.timeout(limit):
                response = await self.llm.achat(chat)
        except TimeoutError as exc:
            raise ModelError(
                f"the LlamaIndex LLM {self._model_name!r} gave no complete reply within {limit:.3g} s",
                model=self._model_name,
                retryable=True,
            ) from exc
        except Exception as exc:
            raise ModelError(
                f"the LlamaIndex LLM {self._model_name!r} failed: {type(exc).__name__}: {exc}",
                model=self._model_name,
            ) from exc
        source = f"the LlamaIndex LLM {self._model_name!r}"
        with reading(source, self._model_name):
            message = field_of(response, "message")
            text = reply_text(field_of(message, "content"), source=source, model=self._model_name)
            check_text_size(text, self._max_reply_bytes, source=source, model=self._model_name)
            reported_in, reported_out = _usage(
                [field_of(response, "additional_kwargs"), field_of(message, "additional_kwargs")],
                field_of(response, "raw"),
            )
            raw = field_of(response, "raw")
            choices = field_of(raw, "choices")
            first = choices[0] if isinstance(choices, list) and choices else None
            reason = field_of(first, "finish_reason") or field_of(raw, "stop_reason")
            return reply_of(
                text,
                model=self._model_name,
                messages=messages,
                input_tokens=reported_in,
                output_tokens=reported_out,
                truncated=cut_at_cap(reason),
            )

    async def aclose(self) -> None:
        """Nothing to release: the LLM belongs to the caller."""


def _llm_name(llm: Any) -> str:
    try:
        name = llm.metadata.model_name
    except Exception:  # a custom LLM whose metadata needs settings it does not have
        name = None
    if isinstance(name, str) and name and name != "unknown":
        return name
    return str(llm.class_name()) if hasattr(llm, "class_name") else type(llm).__name__


def _usage(extras: list[Mapping[str, Any] | None], raw: Any) -> tuple[int | None, int | None]:
    """Token counts as the LLM reported them: LlamaIndex's OpenAI-style keys (on the response, or on the
    message for completion-style LLMs), else the raw provider response's ``usage``."""
    for extra in extras:
        found = _counts(extra or {})
        if found != (None, None):
            return found
    usage = raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None)
    if usage is None:
        return None, None
    if not isinstance(usage, Mapping):
        usage = {key: getattr(usage, key, None) for key in (*_INPUT_KEYS, *_OUTPUT_KEYS)}
    return _counts(usage)


def _counts(data: Mapping[str, Any]) -> tuple[int | None, int | None]:
    def first(keys: tuple[str, ...]) -> int | None:
        for key in keys:
            value = _token_count(data.get(key))
            if value is not None:
                return value
        return None

    return first(_INPUT_KEYS), first(_OUTPUT_KEYS)
