"""A store key's calls in ``rlm-mcp`` (``--store postgresql://...``): who pays for a ``rlm_query`` call, or why not.

`transports.BearerTokenMiddleware` accepted the key and made it the client's principal (``key:NAME``); here each
call reads the key again from the store (a revocation or the period's spend counts at once), and refuses the
call when the key is revoked, may not use the call's model, or has spent its budget (the refusal names the
budget, the spend and when the period resets); else the key pays for the run's calls (`KeyAccount`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from rlm_adapters.errors import QueryError, StoreError
from rlm_adapters.mcp_server.callers import Client

if TYPE_CHECKING:
    from rlm_adapters.core.cache import KeyAccount, KeyStore


async def key_account(keys: KeyStore | None, client: Client, model: str | None) -> KeyAccount | None:
    """The account of the key `client` presented (None: the client has no key), once the call may run.

    Args:
        keys: The store's keys (None without a PostgreSQL store).
        client: The caller.
        model: The call's root model (its ``model`` argument, else the server's).

    Raises:
        QueryError: the key is revoked, may not use `model`, has spent its budget, or the store cannot say.
    """
    if client.store_key is None or keys is None:
        return None
    from rlm_adapters.core.cache import KeyAccount

    name = client.store_key.name
    try:
        standing = (await asyncio.to_thread(keys.standings, name))[0]
    except StoreError as exc:
        raise QueryError(f"key {name!r} cannot be checked: {exc}; try again once the store is back") from None
    if standing.revoked_at is not None:
        raise QueryError(f"key {name!r} was revoked: ask for a new key")
    if model is not None and not standing.allows(model):
        raise QueryError(
            f"key {name!r} may not use the model {model!r}; it may use {', '.join(standing.models or ())}: "
            "pass model= one of those"
        )
    if standing.over_budget:
        raise QueryError(f"insufficient_quota: {standing.refusal()}")
    return KeyAccount(keys, standing)


def resumed_account(keys: KeyStore | None, client: Client) -> KeyAccount | None:
    """The account of a background run an earlier server started for `client`'s key, run again here: its key
    pays for what is not replayed (a spent budget stops it at its first new call, as any run of the key)."""
    if client.store_key is None or keys is None:
        return None
    from rlm_adapters.core.cache import KeyAccount

    return KeyAccount(keys, client.store_key)


def unpaid(account: KeyAccount | None) -> QueryError | None:
    """The refusal for a run its key could not pay a single call of (its budget left less than one call)."""
    refused = account.refused_before_paying if account is not None else None
    return QueryError(f"insufficient_quota: {refused}") if refused is not None else None
