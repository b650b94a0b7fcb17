"""`SessionPool`: persistent RLMs kept per owner and name, within a cap, an idle limit and a lifetime limit.

The MCP server keeps one persistent REPL per client and ``session`` name, `ChatRLM(persistent_threads=True)` one
per ``thread_id``; both keep them here. A call holds a `Lease` on its session for as long as it runs, and a
leased session is never closed under it: not to make room, not by a timer (a lifetime that runs out mid-call
closes the session once the call has returned). Room is made only among the owner's own idle sessions (least
recently used first); when there is none to close, the open is refused with a `SessionLimitError` naming the
limit. Idle and lifetime limits are deadlines kept by one background thread per pool, which also does every
close, so that neither `Lease.release` nor a timer ever blocks the caller's event loop on a sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

from rlm_adapters.errors import ConfigurationError, SessionLimitError

logger = logging.getLogger("rlm_adapters.pool")

CloseReason = Literal["idle_timeout", "max_lifetime", "evicted", "owner_ended", "closed"]


class Closable(Protocol):
    """What a pool keeps: anything with a blocking ``close()`` (a persistent `RLM`)."""

    def close(self) -> None: ...


T = TypeVar("T", bound=Closable)


@dataclass(frozen=True)
class PoolLimits:
    """The limits of a `SessionPool`.

    Attributes:
        max_sessions: Sessions open at once, all owners together.
        max_per_owner: Sessions open at once for one owner (an MCP client; `ChatRLM` has one owner).
        idle_timeout: Seconds without a call after which a session is closed (None: never).
        max_lifetime: Seconds after its opening at which a session is closed (None: never); a call in
            flight then finishes first.
        names: How the interface spells each limit in a refusal (``{"max_sessions": "--max-sessions"}``).
    """

    max_sessions: int = 16
    max_per_owner: int = 4
    idle_timeout: float | None = 1800.0
    max_lifetime: float | None = 8 * 3600.0
    names: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        for limit in ("max_sessions", "max_per_owner"):
            value = getattr(self, limit)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"{self.name(limit)}={value!r} must be an integer >= 1")
        for limit in ("idle_timeout", "max_lifetime"):
            value = getattr(self, limit)
            bad = not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value)
            if value is not None and (bad or value <= 0):
                raise ConfigurationError(f"{self.name(limit)}={value!r} must be a positive number of seconds or None")

    def name(self, limit: str) -> str:
        """The interface's name of `limit` (one of the fields)."""
        return self.names.get(limit, limit)


POOL_DEFAULTS = PoolLimits()


@dataclass(eq=False)
class _Entry(Generic[T]):
    owner: str
    name: Hashable
    options: Any
    value: T | None = None  # None while its first lease builds it
    failed: bool = False
    opened: float = 0.0
    used: float = 0.0
    busy: int = 0
    doomed: CloseReason | None = None  # out of the pool; closed once no lease holds it
    queued: bool = False  # handed to the closer (at most once)


class Lease(Generic[T]):
    """One call's hold on a session: the session is not closed before `release`."""

    def __init__(self, pool: SessionPool[T], entry: _Entry[T]) -> None:
        self._pool = pool
        self._entry = entry
        self._released = False
        assert entry.value is not None
        self.value: T = entry.value

    def release(self) -> None:
        """End the hold (idempotent, never blocks); the session's idle time starts now."""
        if not self._released:
            self._released = True
            self._pool._release(self._entry)


class SessionPool(Generic[T]):
    """Sessions by ``(owner, name)`` within `PoolLimits`; thread-safe, usable from sync and async code.

    Args:
        limits: The caps and timeouts.
        what: The interface's word for a session in messages (``"session"``, ``"thread"``).
        clock: Monotonic seconds (tests may pass their own).
    """

    def __init__(
        self,
        limits: PoolLimits = POOL_DEFAULTS,
        *,
        what: str = "session",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.what = what
        self._clock = clock
        self._cond = threading.Condition()
        self._entries: OrderedDict[tuple[str, Hashable], _Entry[T]] = OrderedDict()  # least recently used first
        self._to_close: list[tuple[_Entry[T], CloseReason]] = []
        self._closing = 0
        self._reaper: threading.Thread | None = None
        self._listeners: list[Callable[[str, Hashable, CloseReason], None]] = []

    # -- opening and leasing ------------------------------------------------------------------------
    def acquire(self, owner: str, name: Hashable, build: Callable[[], T], *, options: Any = None) -> Lease[T]:
        """Lease the session ``(owner, name)``, built by `build` (blocking, outside the pool's lock) if new.

        Raises:
            ConfigurationError: the session exists with other `options`.
            SessionLimitError: the owner or the pool is full and none of the owner's sessions is idle.
        """
        key = (owner, name)
        with self._cond:
            self._expire_due()  # a deadline passed is honoured even if the pool's thread has not woken yet
            entry = self._entries.get(key)
            while entry is not None and entry.value is None and not entry.failed:
                self._cond.wait()  # another call is building it
                entry = self._entries.get(key)
            if entry is not None and not entry.failed:
                if entry.options != options:
                    raise ConfigurationError(
                        f"{self.what} {name!r} was opened with {entry.options}; this call asks for {options}: "
                        f"use the same options or another {self.what} name"
                    )
                entry.busy += 1
                entry.used = self._clock()
                self._entries.move_to_end(key)
                self._cond.notify_all()  # its idle deadline is off
                return Lease(self, entry)
            self._make_room(owner, name)
            entry = _Entry(owner=owner, name=name, options=options, busy=1)
            self._entries[key] = entry
        try:
            value = build()
        except BaseException:
            with self._cond:
                entry.failed = True
                if self._entries.get(key) is entry:
                    del self._entries[key]
                self._cond.notify_all()
            raise
        with self._cond:
            entry.value = value
            entry.opened = entry.used = self._clock()
            self._start_reaper()
            self._cond.notify_all()
        return Lease(self, entry)

    @contextlib.asynccontextmanager
    async def alease(
        self, owner: str, name: Hashable, build: Callable[[], T], *, options: Any = None
    ) -> AsyncIterator[T]:
        """`acquire` from async code (in a worker thread: building may import an SDK), released on exit."""
        opening = asyncio.ensure_future(asyncio.to_thread(self.acquire, owner, name, build, options=options))
        try:
            lease = await asyncio.shield(opening)
        except asyncio.CancelledError:
            # The thread goes on; whatever it leases is released as soon as it has.
            opening.add_done_callback(_release_when_done)
            raise
        try:
            yield lease.value
        finally:
            lease.release()

    def _make_room(self, owner: str, name: Hashable) -> None:
        """Under the lock: close the owner's least recently used idle session if a limit is reached."""
        own = [e for e in self._entries.values() if e.owner == owner]
        if len(own) >= self.limits.max_per_owner:
            limit, count = "max_per_owner", self.limits.max_per_owner
            why = f"{count} {self.what}s are open for this caller and each has a call in flight"
        elif len(self._entries) >= self.limits.max_sessions:
            limit, count = "max_sessions", self.limits.max_sessions
            why = f"{count} {self.what}s are open in all and none of this caller's is idle"
        else:
            return
        idle = next((e for e in own if e.busy == 0 and e.value is not None), None)
        if idle is None:
            raise SessionLimitError(
                f"{self.what} {name!r} cannot be opened: {why} ({self.limits.name(limit)}={count}); "
                f"wait for a call to finish, or reuse an open {self.what}"
            )
        self._doom(idle, "evicted")

    # -- closing --------------------------------------------------------------------------------------
    def _release(self, entry: _Entry[T]) -> None:
        with self._cond:
            entry.busy -= 1
            entry.used = self._clock()
            if entry.busy == 0 and entry.doomed is not None:
                self._queue_close(entry)
            self._cond.notify_all()

    def _doom(self, entry: _Entry[T], reason: CloseReason, *, interrupt: bool = False) -> None:
        """Under the lock: take `entry` out of the pool; it is closed now if idle (or if `interrupt`: its
        close then ends the call in flight as cancelled), else when released."""
        key = (entry.owner, entry.name)
        if self._entries.get(key) is entry:
            del self._entries[key]
        if entry.doomed is None:
            entry.doomed = reason
        if (entry.busy == 0 or interrupt) and entry.value is not None:
            self._queue_close(entry)
        self._cond.notify_all()

    def _queue_close(self, entry: _Entry[T]) -> None:
        """Under the lock: hand `entry` to the closer, once."""
        if not entry.queued:
            entry.queued = True
            assert entry.doomed is not None
            self._to_close.append((entry, entry.doomed))
            self._start_reaper()

    def close_owner(self, owner: str, reason: CloseReason = "owner_ended") -> None:
        """Close every session of `owner` (those with a call in flight once it returns); never blocks."""
        with self._cond:
            for entry in [e for e in self._entries.values() if e.owner == owner]:
                self._doom(entry, reason)

    def close(self, timeout: float = 60.0) -> None:
        """Close every session and wait until they are closed; a call in flight ends as cancelled.

        The pool stays usable: a later `acquire` opens a fresh session.
        """
        with self._cond:
            for entry in list(self._entries.values()):
                self._doom(entry, "closed", interrupt=True)
            batch, self._to_close = self._to_close, []
            self._closing += len(batch)
        self._close_batch(batch)
        deadline = self._clock() + timeout
        with self._cond:
            while self._closing or self._to_close:  # the reaper's own batch
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._cond.wait(left)

    async def aclose(self) -> None:
        """`close` from async code (in a worker thread)."""
        await asyncio.to_thread(self.close)

    def add_listener(self, listener: Callable[[str, Hashable, CloseReason], None]) -> None:
        """Call ``listener(owner, name, reason)`` after each session is closed (on the pool's thread)."""
        self._listeners.append(listener)

    def names(self, owner: str) -> list[Hashable]:
        """The open sessions of `owner`, least recently used first."""
        with self._cond:
            return [e.name for e in self._entries.values() if e.owner == owner and not e.failed]

    def __len__(self) -> int:
        with self._cond:
            return len(self._entries)

    # -- the pool's thread ----------------------------------------------------------------------------
    def _start_reaper(self) -> None:
        """Under the lock: make sure the thread that keeps deadlines and closes sessions runs."""
        if self._reaper is None:
            self._reaper = threading.Thread(target=self._reap, name=f"rlm-{self.what}-pool", daemon=True)
            self._reaper.start()
        self._cond.notify_all()

    def _next_deadline(self) -> tuple[float, _Entry[T], CloseReason] | None:
        soonest: tuple[float, _Entry[T], CloseReason] | None = None
        for entry in self._entries.values():
            if entry.value is None:
                continue
            candidates: list[tuple[float, CloseReason]] = []
            if self.limits.max_lifetime is not None:
                candidates.append((entry.opened + self.limits.max_lifetime, "max_lifetime"))
            if self.limits.idle_timeout is not None and entry.busy == 0:
                candidates.append((entry.used + self.limits.idle_timeout, "idle_timeout"))
            for at, reason in candidates:
                if soonest is None or at < soonest[0]:
                    soonest = (at, entry, reason)
        return soonest

    def _expire_due(self) -> None:
        """Under the lock: take out every session whose idle or lifetime deadline has passed."""
        while (due := self._next_deadline()) is not None and due[0] <= self._clock():
            self._doom(due[1], due[2])

    def _reap(self) -> None:
        while True:
            with self._cond:
                while not self._to_close:
                    due = self._next_deadline()
                    if due is None:
                        if not self._entries:
                            self._reaper = None  # started again by the next session
                            return
                        self._cond.wait()
                        continue
                    at, entry, reason = due
                    left = at - self._clock()
                    if left <= 0:
                        self._doom(entry, reason)
                    else:
                        self._cond.wait(left)
                batch, self._to_close = self._to_close, []
                self._closing += len(batch)
            self._close_batch(batch)

    def _close_batch(self, batch: list[tuple[_Entry[T], CloseReason]]) -> None:
        for entry, reason in batch:
            try:
                assert entry.value is not None
                entry.value.close()
            except Exception:  # one session failing to close must not keep the others open
                logger.exception("closing %s %r of %r failed", self.what, entry.name, entry.owner)
            finally:
                with self._cond:
                    self._closing -= 1
                    self._cond.notify_all()
            for listener in self._listeners:
                try:
                    listener(entry.owner, entry.name, reason)
                except Exception:
                    logger.exception("a %s pool listener failed", self.what)


def _release_when_done(opening: asyncio.Future[Lease[Any]]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().release()


__all__ = ["POOL_DEFAULTS", "CloseReason", "Lease", "PoolLimits", "SessionPool"]
