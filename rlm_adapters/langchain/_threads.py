"""`ChatRLM(persistent_threads=True)`: one persistent REPL per ``thread_id``, kept within limits.

The engines live in a `core.pool.SessionPool` (the one the MCP server keeps its sessions in): at most
``max_threads`` open, each closed after ``thread_idle_timeout`` seconds without a call or
``thread_max_lifetime`` seconds after it opened; opening one more closes the least recently used idle thread,
and a thread with a call in flight is never closed under it (with all of them busy the call is refused with
a `SessionLimitError` naming ``max_threads``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from rlm_adapters.core import RLM
from rlm_adapters.hosting import POOL_DEFAULTS, PoolLimits, SessionPool
from rlm_adapters.langchain._run import Engine

# How refusals name the limits: ChatRLM's fields.
FIELD_NAMES = {
    "max_sessions": "max_threads",
    "max_per_owner": "max_threads",
    "idle_timeout": "thread_idle_timeout",
    "max_lifetime": "thread_max_lifetime",
}
_OWNER = "threads"  # one chat model is one owner: its cap is the whole pool's


def thread_limits(max_threads: Any, idle_timeout: Any, max_lifetime: Any) -> PoolLimits:
    """The pool limits of ChatRLM's thread fields (raises `ConfigurationError` naming the field)."""
    return dataclasses.replace(
        POOL_DEFAULTS,
        max_sessions=max_threads,
        max_per_owner=max_threads,
        idle_timeout=idle_timeout,
        max_lifetime=max_lifetime,
        names=FIELD_NAMES,
    )


@dataclass(frozen=True)
class ThreadKey:
    """A thread's engine: its ``thread_id`` and the call's model override (each override its own REPL)."""

    thread: str
    model: str | None

    def __repr__(self) -> str:
        return repr(self.thread) if self.model is None else f"{self.thread!r} (model {self.model!r})"


class ThreadEngines:
    """The persistent engines of one `ChatRLM`, by ``(thread_id, model override)``.

    Args:
        limits: From `thread_limits`.
        build: Makes a thread's persistent engine, given the call's model override.
    """

    def __init__(self, limits: PoolLimits, build: Callable[[str | None], RLM]) -> None:
        self.pool: SessionPool[RLM] = SessionPool(limits, what="thread")
        self._build = build

    def engine(self, thread: str) -> Engine:
        """The engine of one call on `thread`: leased for the call, so it is not closed under it."""

        def lease(model_override: str | None) -> AbstractAsyncContextManager[RLM]:
            return self.pool.alease(_OWNER, ThreadKey(thread, model_override), lambda: self._build(model_override))

        return lease

    def close(self) -> None:
        """Close every thread's REPL; a call in flight ends with ``finish_reason="cancelled"``."""
        self.pool.close()


def fresh(build: Callable[[str | None], RLM]) -> Engine:
    """The engine of a call outside any thread: a new `RLM`, nothing to hold."""

    def engine(model_override: str | None) -> AbstractAsyncContextManager[RLM]:
        return contextlib.nullcontext(build(model_override))

    return engine
