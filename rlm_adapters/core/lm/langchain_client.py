"""Any LangChain chat model as a model client: Bedrock, Gemini, Azure and the rest without our own clients.

``RLM(backend="langchain", backend_kwargs={"model": ChatAnthropic(...)})`` makes it the root model;
``other_backends=["langchain"], other_backend_kwargs=[{"model": ...}]`` a sub-model. Usage comes from
the reply's `usage_metadata`; retries are the chat model's own. ``timeout`` bounds each whole call (the chat
model's own timeout, if it has one, is usually per read), and the run's deadline always does. The chat model
reads its replies with its own HTTP client, which belongs to the caller: ``max_reply_bytes`` is checked on the
reply's text once it is in.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._http import DEFAULT_MAX_REPLY_BYTES
from rlm_adapters.core.lm._http import max_reply_bytes as _max_reply_bytes
from rlm_adapters.core.lm._reply import (
    check_text_size,
    cut_at_cap,
    field_of,
    reading,
    reply_of,
    reply_text,
    usage_field,
)
from rlm_adapters.core.lm._retry import RetryPolicy
from rlm_adapters.core.lm.base import LMResponse, Message, ModelClient
from rlm_adapters.core.lm.deadline import bounded
from rlm_adapters.core.lm.reply_identity import wrapped_identity
from rlm_adapters.errors import ConfigurationError, ModelError

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage


def chat_model_name(model: BaseChatModel) -> str:
    """The best name a chat model gives itself (``model_name``, ``model``, ``model_id``, its type)."""
    for attribute in ("model_name", "model", "model_id", "deployment_name"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    try:
        return str(model._llm_type)
    except Exception:  # a model without `_llm_type` still needs a name for usage and pricing
        return type(model).__name__


class LangChainClient(ModelClient):
    """An `LMClient` over a LangChain `BaseChatModel`.

    Args:
        model: The chat model instance (any provider package's chat model).
        model_name: The name calls are accounted and priced under (default: the model's own name).
        timeout: Seconds one whole call may take (default 600).
        max_reply_bytes: The longest reply text accepted, in characters (default 32 MiB).
    """

    backend = "langchain"

    def __init__(
        self,
        model: BaseChatModel,
        model_name: str | None = None,
        *,
        timeout: float = 600.0,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
    ) -> None:
        language_models = require("langchain_core.language_models", extra="langchain", feature="backend='langchain'")
        if not isinstance(model, language_models.BaseChatModel):
            raise ConfigurationError(
                f"backend='langchain' needs backend_kwargs={{'model': <a LangChain chat model>}}, got {model!r}"
            )
        self._messages = require("langchain_core.messages", extra="langchain", feature="backend='langchain'")
        self.model = model
        self._model_name = model_name or chat_model_name(model)
        limits = {"timeout": timeout, "max_reply_bytes": max_reply_bytes}
        self._timeout = RetryPolicy.from_kwargs("langchain", limits).request_timeout
        self._max_reply_bytes = _max_reply_bytes("langchain", limits)

    @property
    def model_name(self) -> str:
        """The name the calls are accounted under."""
        return self._model_name

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: the chat model as LangChain's own cache keys it."""
        return wrapped_identity("langchain", self._model_name, self.model, self.model._get_llm_string)

    def _convert(self, messages: list[Message]) -> list[BaseMessage]:
        kinds: dict[str, Any] = {
            "system": self._messages.SystemMessage,
            "user": self._messages.HumanMessage,
            "assistant": self._messages.AIMessage,
        }
        return [kinds[m["role"]](content=m["content"]) for m in messages]

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One call of the chat model."""
        limit = bounded(self._timeout)
        try:
            async with asyncio.timeout(limit):
                reply = await self.model.ainvoke(self._convert(messages))
        except TimeoutError as exc:
            raise ModelError(
                f"LangChain model {self._model_name!r} gave no complete reply within {limit:.3g} s",
                model=self._model_name,
                retryable=True,
            ) from exc
        except Exception as exc:
            raise ModelError(
                f"LangChain model {self._model_name!r} failed ({type(exc).__name__}): {exc}",
                model=self._model_name,
            ) from exc
        source = f"LangChain model {self._model_name!r}"
        with reading(source, self._model_name):
            # LangChain's own `.text` joins text blocks by LangChain's rules; raw content only when it has none.
            joined = getattr(reply, "text", None)
            content = field_of(reply, "content")
            text = joined if isinstance(joined, str) else reply_text(content, source=source, model=self._model_name)
            check_text_size(text, self._max_reply_bytes, source=source, model=self._model_name)
            usage = field_of(reply, "usage_metadata")
            # Models that report nothing are still budgeted: estimated from the text.
            return reply_of(
                text,
                model=self._model_name,
                messages=messages,
                input_tokens=field_of(usage, "input_tokens"),
                output_tokens=field_of(usage, "output_tokens"),
                # LangChain's standard usage: input_tokens include the prompt cache's reads and writes.
                cache_read_tokens=usage_field(usage, "input_token_details", "cache_read"),
                cache_write_tokens=usage_field(usage, "input_token_details", "cache_creation"),
                truncated=_cut(field_of(reply, "response_metadata")),
            )

    async def aclose(self) -> None:
        """Nothing to release: the chat model belongs to the caller."""


def _cut(metadata: Any) -> bool:
    """Whether a chat model's ``response_metadata`` says its reply was cut at its token cap (OpenAI-style
    ``finish_reason``, Anthropic-style ``stop_reason``, Bedrock's ``stopReason``)."""
    return any(cut_at_cap(field_of(metadata, key)) for key in ("finish_reason", "stop_reason", "stopReason"))
