"""The call cache: every model call of a run looked up before it is sent, every reply kept as it returns.

This is the cache's face: the engine imports only the names below. ``RLM(cache=...)`` takes a path (an
`SQLiteCallCache` is opened on it) or any `CallCache`; `open_cache` makes that choice once.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.cache.base import CachedReply, CallCache, ScopedCache
from rlm_adapters.core.cache.run_calls import RunCalls, Ticket
from rlm_adapters.errors import ConfigurationError

if TYPE_CHECKING:
    from rlm_adapters.core.cache.sqlite import SQLiteCallCache

CacheSpec = str | os.PathLike[str] | CallCache | None

__all__ = [
    "CacheSpec",
    "CachedReply",
    "CallCache",
    "RunCalls",
    "SQLiteCallCache",
    "ScopedCache",
    "Ticket",
    "open_cache",
]


def __getattr__(name: str) -> Any:
    # The SQLite store (sqlite3 and its file checks, about 15 ms) loads when a run names a cache, not before.
    if name == "SQLiteCallCache":
        from rlm_adapters.core.cache.sqlite import SQLiteCallCache

        return SQLiteCallCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_cache(spec: Any) -> tuple[CallCache | None, bool]:
    """The store `spec` names, and whether the caller opened it (and so closes it).

    Args:
        spec: None (no cache), a path (an `SQLiteCallCache`, created if missing) or a `CallCache`.

    Raises:
        CacheError: when the path cannot be used as a cache (naming it and why).
        ConfigurationError: when `spec` is neither.
    """
    if spec is None:
        return None, False
    if isinstance(spec, str | os.PathLike):
        if not os.fspath(spec):
            raise ConfigurationError("cache='' is not a path: give a file such as 'calls.sqlite', or None")
        from rlm_adapters.core.cache.sqlite import SQLiteCallCache

        return SQLiteCallCache(spec), True
    if isinstance(spec, CallCache):
        return spec, False
    raise ConfigurationError(
        f"cache={spec!r} must be a file path (a SQLite call cache) or a CallCache object with get, put and close"
    )
