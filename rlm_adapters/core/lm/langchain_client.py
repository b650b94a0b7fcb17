"""Any LangChain chat model as a model client: Bedrock, Gemini, Azure and the rest without our own clients.

``RLM(backend="langchain", backend_kwargs={"model": ChatAnthropic(...)})`` makes it the root model;
``other_backends=["langchain"], other_backend_kwargs=[{"model": ...}]`` a sub-model. Usage comes from
the reply's `usage_metadata`; retries and timeouts are the chat model's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._common import usage_field
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.tokens import estimate_tokens
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


class LangChainClient:
    """An `LMClient` over a LangChain `BaseChatModel`.

    Args:
        model: The chat model instance (any provider package's chat model).
        model_name: The name calls are accounted and priced under (default: the model's own name).
    """

    def __init__(self, model: BaseChatModel, model_name: str | None = None) -> None:
        language_models = require("langchain_core.language_models", extra="langchain", feature="backend='langchain'")
        if not isinstance(model, language_models.BaseChatModel):
            raise ConfigurationError(
                f"backend='langchain' needs backend_kwargs={{'model': <a LangChain chat model>}}, got {model!r}"
            )
        self._messages = require("langchain_core.messages", extra="langchain", feature="backend='langchain'")
        self.model = model
        self._model_name = model_name or chat_model_name(model)

    @property
    def model_name(self) -> str:
        """The name the calls are accounted under."""
        return self._model_name

    def _convert(self, messages: list[Message]) -> list[BaseMessage]:
        kinds: dict[str, Any] = {
            "system": self._messages.SystemMessage,
            "user": self._messages.HumanMessage,
            "assistant": self._messages.AIMessage,
        }
        return [kinds[m["role"]](content=m["content"]) for m in messages]

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One call of the chat model."""
        try:
            reply = await self.model.ainvoke(self._convert(messages))
        except Exception as exc:
            raise ModelError(
                f"LangChain model {self._model_name!r} failed ({type(exc).__name__}): {exc}",
                model=self._model_name,
            ) from exc
        text = reply.text
        usage = getattr(reply, "usage_metadata", None)
        if usage:
            input_tokens, output_tokens = int(usage["input_tokens"]), int(usage["output_tokens"])
        else:
            # Models that report nothing are still budgeted: estimate as the scripted model does.
            input_tokens = max(1, sum(len(m["content"]) for m in messages) // 4)
            output_tokens = estimate_tokens(text)
        # LangChain's standard usage: input_tokens include the prompt cache's reads and writes.
        details = usage.get("input_token_details") if usage else None
        return LMResponse(
            text=text,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            model=self._model_name,
            cache_read_tokens=usage_field(details, "cache_read"),
            cache_write_tokens=usage_field(details, "cache_creation"),
        )

    async def aclose(self) -> None:
        """Nothing to release: the chat model belongs to the caller."""
