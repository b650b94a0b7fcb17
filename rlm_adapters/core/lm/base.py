"""The one async protocol every model client implements: messages in, text and usage out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable


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
class ChecksCredentials(Protocol):
    """A backend (a client class, or a gateway's factory) that says which credentials a front end lacks."""

    def credentials_problem(self, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        """See `ModelClient.credentials_problem`."""
        ...


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


class ModelClient:
    """The base of every built-in model client: what the engine reads of a client besides `LMClient`'s
    three members, declared once with its default.

    A client written against the bare `LMClient` protocol still works: `declared` wraps it in this shape,
    reading its optional members once.

    Attributes:
        backend: The backend name it was built under (``"openai"``, ``"vllm"``, ...); "" for none.
        gen_ai_provider: Its OpenTelemetry ``gen_ai.provider.name`` when the client knows it better than
            its module does (None: found from the client's module).
    """

    backend: str = ""
    gen_ai_provider: str | None = None

    @property
    def model_name(self) -> str:
        """The name used for pricing, usage and `llm_query(..., model=NAME)`."""
        raise NotImplementedError

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """Send `messages`, return the reply. Raise `rlm_adapters.errors.ModelError` on failure."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release connections (nothing by default)."""

    @property
    def endpoint(self) -> str | None:
        """Where calls go: the engine learns one concurrency limit per endpoint (None: per model)."""
        return None

    @property
    def max_output_tokens(self) -> int | None:
        """The reply cap the client sends with every request, if any: the budget holds this much output for
        each call in flight."""
        return None

    def cache_identity(self) -> dict[str, Any] | None:
        """What besides the messages decides a reply (backend, endpoint, model, settings; no secrets), for the
        call cache's key; None: the client's class, model and endpoint."""
        return None

    @classmethod
    def credentials_problem(cls, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        """Why `settings` (the backend's keyword arguments) and `environ` reach no model, worded as the
        command-line flags and environment variables to set (`rlm ask`, `rlm serve`, `rlm-mcp`), or None.

        A front end asks before anything is built; the client's own construction checks the same in
        Python's words (``backend_kwargs``). None by default: nothing is known to be missing.
        """
        return None

    @property
    def implementation(self) -> object:
        """The object that makes the calls (a client `declared` wraps: the wrapped one)."""
        return self


class _Declared(ModelClient):
    """A client that implements only the `LMClient` protocol, with `ModelClient`'s members read from it once."""

    def __init__(self, client: LMClient) -> None:
        self.wrapped = client
        self._model_name = client.model_name
        endpoint = getattr(client, "endpoint", None)
        self._endpoint = endpoint if isinstance(endpoint, str) and endpoint else None
        cap = getattr(client, "max_output_tokens", None)
        self._cap = cap if isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0 else None
        method = getattr(client, "cache_identity", None)
        self._identity = method if callable(method) else None
        provider = getattr(client, "gen_ai_provider", None)
        self.gen_ai_provider = provider if isinstance(provider, str) and provider else None
        backend = getattr(client, "backend", "")
        self.backend = backend if isinstance(backend, str) else ""

    @property
    def model_name(self) -> str:
        return self._model_name

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        return await self.wrapped.acomplete(messages)

    async def aclose(self) -> None:
        await self.wrapped.aclose()

    @property
    def endpoint(self) -> str | None:
        return self._endpoint

    @property
    def max_output_tokens(self) -> int | None:
        return self._cap

    def cache_identity(self) -> dict[str, Any] | None:
        identity = self._identity() if self._identity is not None else None
        return dict(identity) if isinstance(identity, Mapping) else None

    @property
    def implementation(self) -> object:
        return self.wrapped


def declared(client: LMClient) -> ModelClient:
    """`client` as a `ModelClient`: itself when it is one, else wrapped (its optional members read once)."""
    return client if isinstance(client, ModelClient) else _Declared(client)
