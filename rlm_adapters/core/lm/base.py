"""The one async protocol every model client implements: messages in, text and usage out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, TypedDict, runtime_checkable


class Message(TypedDict):
    """One chat message."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class LMResponse:
    """What a model call returns.

    Attributes:
        text: The reply text.
        input_tokens: Prompt tokens, as the provider reported them (estimated when it reports none), including
            those its prompt cache served or stored.
        output_tokens: Completion tokens, likewise.
        model: The model name the call is accounted under.
        cost: The provider's own price of the call (LiteLLM reports one); None: from the engine's price table.
        near_rate_limit: The provider's rate-limit headers say no request is left in this window
            (``x-ratelimit-remaining-requests: 0``): the engine sends fewer calls at once.
        cached: The reply was replayed from the run's call cache: no request was made, nothing was paid.
        cache_read_tokens: Of `input_tokens`, those the provider's prompt cache served (priced at its cache
            read rate).
        cache_write_tokens: Of `input_tokens`, those written to the provider's prompt cache (Anthropic bills
            them at 1.25x the input price).
        truncated: The reply was cut at its token cap (the run's ``max_reply_tokens`` or the client's own):
            OpenAI's ``finish_reason`` "length", Anthropic's and Bedrock's ``max_tokens`` stop reason, Gemini's
            ``MAX_TOKENS``.
    """

    text: str
    input_tokens: int
    output_tokens: int
    model: str
    cost: float | None = None
    near_rate_limit: bool = False
    cached: bool = False
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    truncated: bool = False


@runtime_checkable
class LMClient(Protocol):
    """A model the engine can call. Implementations must be safe to call concurrently."""

    @property
    def model_name(self) -> str:
        """The name used for pricing, usage and `llm_query(..., model=NAME)`."""
        ...

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """Send `messages`, return the reply. Raise `rlm_adapters.errors.ModelError` on failure."""
        ...

    async def aclose(self) -> None:
        """Release connections. Called once when the run that built the client ends, inside its event loop."""
        ...
