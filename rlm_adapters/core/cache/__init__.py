"""The call cache: every model call of a run looked up before it is sent, every reply kept as it returns.

This is the cache's face: the engine imports only the names below. ``RLM(cache=...)`` takes a path or
``sqlite:///PATH`` (an `SQLiteCallCache` is opened on it), a ``postgresql://`` URL (a `PostgresCallCache`, shared by
every process on that store) or any `CallCache`; `open_cache` makes that choice once.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from rlm_adapters._extras import require
from rlm_adapters.core.cache.base import CachedReply, CallCache, ScopedCache
from rlm_adapters.core.cache.run_calls import RunCalls, Ticket
from rlm_adapters.core.cache.store_url import (
    KEY_PREFIX,
    SQLITE_PREFIX,
    is_postgres,
    is_url,
    password_flag_warning,
    shown_url,
    url_password,
)
from rlm_adapters.errors import ConfigurationError

if TYPE_CHECKING:
    from rlm_adapters.core.cache.postgres import PostgresCallCache
    from rlm_adapters.core.cache.postgres_keys import KeyAccount, KeyStanding, KeyStore, KeyTaken, UnknownKey, UsageRow
    from rlm_adapters.core.cache.postgres_store import Connection as StoreConnection
    from rlm_adapters.core.cache.postgres_store import PostgresStore
    from rlm_adapters.core.cache.sqlite import SQLiteCallCache

CacheSpec = str | os.PathLike[str] | CallCache | None
_KEY_NAMES = ("KeyAccount", "KeyStanding", "KeyStore", "KeyTaken", "UnknownKey", "UsageRow")

__all__ = [
    "KEY_PREFIX",
    "CacheSpec",
    "CachedReply",
    "CallCache",
    "KeyAccount",
    "KeyStanding",
    "KeyStore",
    "KeyTaken",
    "PostgresCallCache",
    "PostgresStore",
    "RunCalls",
    "SQLiteCallCache",
    "ScopedCache",
    "StoreConnection",
    "Ticket",
    "UnknownKey",
    "UsageRow",
    "is_postgres",
    "open_cache",
    "password_flag_warning",
    "shown_url",
    "store_keys",
    "url_password",
]


def __getattr__(name: str) -> Any:
    # The SQLite store (sqlite3 and its file checks, about 15 ms) loads when a run names a cache, not before.
    if name == "SQLiteCallCache":
        from rlm_adapters.core.cache.sqlite import SQLiteCallCache

        return SQLiteCallCache
    if name == "PostgresCallCache":  # psycopg loads only for a postgresql:// store
        from rlm_adapters.core.cache.postgres import PostgresCallCache

        return PostgresCallCache
    if name in ("PostgresStore", "StoreConnection") or name in _KEY_NAMES:  # psycopg: a missing one names the extra
        for module in ("psycopg", "psycopg_pool"):
            require(module, extra="store", feature="a postgresql:// store and its keys")
    if name in ("PostgresStore", "StoreConnection"):  # the database other stores (runs, sessions) share
        from rlm_adapters.core.cache import postgres_store

        return postgres_store.PostgresStore if name == "PostgresStore" else postgres_store.Connection
    if name in _KEY_NAMES:  # keys and budgets: a postgresql:// store's too
        from rlm_adapters.core.cache import postgres_keys

        return getattr(postgres_keys, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def store_keys(cache: CallCache | None) -> KeyStore | None:
    """The keys of the PostgreSQL store `cache` is in (``rlm keys``), or None for any other cache."""
    from rlm_adapters.core.cache.postgres import PostgresCallCache

    if not isinstance(cache, PostgresCallCache):
        return None
    from rlm_adapters.core.cache.postgres_keys import KeyStore

    return KeyStore(cache.database)


def open_cache(spec: Any) -> tuple[CallCache | None, bool]:
    """The store `spec` names, and whether the caller opened it (and so closes it).

    Args:
        spec: None (no cache), a path or ``sqlite:///PATH`` (an `SQLiteCallCache`, created if missing), a
            ``postgresql://`` URL (a `PostgresCallCache`: the database must exist) or a `CallCache`.

    Raises:
        CacheError: when the path cannot be used as a cache (naming it and why).
        StoreError: when the PostgreSQL store cannot be reached or used (naming it without its password).
        MissingExtraError: when a PostgreSQL store is named without the ``store`` extra installed.
        ConfigurationError: when `spec` is none of these.
    """
    if spec is None:
        return None, False
    if isinstance(spec, str) and is_url(spec):
        if is_postgres(spec):
            for module in ("psycopg", "psycopg_pool"):
                require(module, extra="store", feature="a postgresql:// store")
            from rlm_adapters.core.cache.postgres import PostgresCallCache

            return PostgresCallCache(spec), True
        if not spec.startswith(SQLITE_PREFIX):
            scheme = spec.partition("://")[0]
            raise ConfigurationError(
                f"cache= names a {scheme}:// store, which is not one: give a file path, sqlite:///PATH or "
                "postgresql://USER@HOST/DATABASE"
            )
        spec = spec.removeprefix(SQLITE_PREFIX)  # SQLAlchemy's spelling: sqlite:///relative, sqlite:////absolute
    if isinstance(spec, str | os.PathLike):
        if not os.fspath(spec):
            raise ConfigurationError("cache='' is not a path: give a file such as 'calls.sqlite', or None")
        from rlm_adapters.core.cache.sqlite import SQLiteCallCache

        return SQLiteCallCache(spec), True
    if isinstance(spec, CallCache):
        return spec, False
    raise ConfigurationError(
        f"cache={spec!r} must be a file path (a SQLite call cache), a postgresql:// URL or a CallCache object with "
        "get, put and close"
    )
