"""The template of the provider clients (OpenAI and its gateways, Azure, Anthropic, Gemini, Bedrock, LiteLLM).

What each of them did alike is here once: the model name's check, the refusal of an unknown
``backend_kwargs`` key, the retry policy (``timeout``, ``max_retries``), the reply cap (``max_reply_bytes``),
the SDK client built on first use (inside the run's event loop: its connection pool binds to it) and closed
by `aclose`, and one call through `call_with_retries` under the client's provider name. A provider's module
keeps what is its own: its keys, its credentials, its request and its reply.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from rlm_adapters.core.lm._common import check_keys, require_model_name
from rlm_adapters.core.lm._http import max_reply_bytes
from rlm_adapters.core.lm._retry import Failure, RetryPolicy, call_with_retries
from rlm_adapters.core.lm.base import ModelClient

T = TypeVar("T")

# Keys every provider client takes, read here: seconds per request, client-side retries, the reply's size cap.
SHARED_KEYS = frozenset({"timeout", "max_retries", "max_reply_bytes"})


class SDKClient(ModelClient):
    """A provider's model client: the shared checks at construction, the lazy SDK client, the retried call.

    Subclasses set `backend` and `provider`, call ``super().__init__`` with the keys their backend accepts,
    and build their SDK client in `_build_sdk_client` (after `_prepare_sdk`, awaited before the first build).

    Args:
        model_name: The model to call (a non-empty string, else a `ConfigurationError` naming the backend).
        kwargs: The backend's settings; ``timeout``, ``max_retries`` and ``max_reply_bytes`` are taken out.
        known: The other keys the backend accepts (None: the subclass checks the keys itself).
    """

    provider = ""  # the provider's name in messages ("OpenAI", "Anthropic", ...)

    def __init__(self, model_name: Any, kwargs: dict[str, Any], known: Iterable[str] | None) -> None:
        self._model_name = require_model_name(self.backend, model_name)
        if known is not None:
            check_keys(self.backend, kwargs, {*SHARED_KEYS, *known})
        # Given max_retries, the client retries as asked and the engine retries only overloads (429/503).
        self._policy = RetryPolicy.from_kwargs(self.backend, kwargs)
        self._max_reply_bytes = max_reply_bytes(self.backend, kwargs)
        self._connection: Any = None  # the SDK's client, built at the first call

    @property
    def model_name(self) -> str:
        """The model this client calls."""
        return self._model_name

    async def _prepare_sdk(self) -> None:
        """Awaited before the SDK client is first built (what would hold the event loop, done off it)."""

    def _build_sdk_client(self) -> Any:
        """The SDK's client, for this run's event loop."""
        raise NotImplementedError

    async def _close_sdk_client(self, client: Any) -> None:
        """Close what `_build_sdk_client` made."""
        await client.close()

    async def _sdk(self) -> Any:
        """The SDK client, built at the first call (inside the run's event loop): validating settings in
        ``RLM()`` builds none."""
        if self._connection is None:
            await self._prepare_sdk()
            if self._connection is None:  # a concurrent first call may have built it meanwhile
                self._connection = self._build_sdk_client()
        return self._connection

    async def _send(
        self,
        attempt: Callable[[], Awaitable[T]],
        classify: Callable[[Exception], Failure | None],
        *,
        where: str | None = None,
        secrets: tuple[str, ...] = (),
    ) -> T:
        """One call under the client's retry policy and per-request timeout (`_retry.call_with_retries`)."""
        return await call_with_retries(
            attempt,
            policy=self._policy,
            classify=classify,
            provider=self.provider,
            model=self._model_name,
            where=where,
            secrets=secrets,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connections (if a call opened them)."""
        client, self._connection = self._connection, None
        if client is not None:
            await self._close_sdk_client(client)
