"""`rlm serve`'s keys (``--store postgresql://...``): a key as the request's bearer, and what it may not do.

A key of the store (``rlm keys add``) is accepted beside the server's ``--token``. Found, it is put in the
request's scope (`KEY_SCOPE`); the request is then refused, in OpenAI's shape, when the key may not use the
model it names (403) or has spent its budget for the period (429 ``insufficient_quota``, with the budget, the
spend and when it resets); else its run's calls are held and settled against it (`KeyAccount`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.cache import KEY_PREFIX
from rlm_adapters.errors import StoreError
from rlm_adapters.http_guard import BearerKeys, KeyLookupFailed, Send
from rlm_adapters.serve.errors import OpenAIError

if TYPE_CHECKING:
    from rlm_adapters.core.cache import KeyAccount, KeyStanding, KeyStore

KEY_SCOPE = "rlm_adapters.key"


def bearer_keys(keys: KeyStore, *, anonymous: bool) -> BearerKeys:
    """The keys of `keys` as bearer tokens (`anonymous`: a loopback server without a token lets any other pass)."""

    async def find(secret: str) -> Mapping[str, Any] | None:
        try:
            standing = await asyncio.to_thread(keys.lookup, secret)
        except StoreError as exc:
            raise KeyLookupFailed(str(exc)) from None
        return None if standing is None else {KEY_SCOPE: standing}

    return BearerKeys(find, KEY_PREFIX, anonymous, _unavailable)


async def _unavailable(send: Send, reason: str) -> None:
    error = OpenAIError(503, f"the keys cannot be checked: {reason}", "server_error", code="store_unavailable")
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"10")]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(error.body()).encode()})


def key_of(scope: Mapping[str, Any]) -> KeyStanding | None:
    """The key the request's bearer was, or None (the server's token, or no key store)."""
    return scope.get(KEY_SCOPE)


def key_refusal(key: KeyStanding, model: str) -> OpenAIError | None:
    """Why `key` may not run a request for `model` now (None: it may)."""
    if not key.allows(model):
        allowed = ", ".join(key.models or ())
        return OpenAIError(
            403,
            f"key {key.name!r} may not use the model {model[:200]!r}; it may use {allowed}",
            "permission_error",
            "model",
            "model_not_allowed",
        )
    if key.over_budget:
        return quota_error(key.refusal())
    return None


def quota_error(message: str) -> OpenAIError:
    """OpenAI's 429 for a key whose budget is spent (`message`: the budget, the spend, when it resets)."""
    return OpenAIError(429, message, "rate_limit_error", code="insufficient_quota")


def unpaid(account: KeyAccount | None) -> OpenAIError | None:
    """The 429 for a run its key could not pay a single call of (its budget left less than one call), else None."""
    refused = account.refused_before_paying if account is not None else None
    return quota_error(refused) if refused is not None else None
