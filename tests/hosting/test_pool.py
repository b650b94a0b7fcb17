"""`SessionPool`: per-owner quotas, a cap, idle and lifetime timers, and no session closed under a call."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from pathlib import Path

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.errors import ConfigurationError, SessionLimitError
from rlm_adapters.hosting.pool import CloseReason, PoolLimits, SessionPool
from tests.core.sandbox.helpers import ProcessWatch


class Door:
    """The smallest thing a pool keeps: it records that it was closed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()


class Closes:
    """A pool listener that lets a test wait for a given number of closes (the pool's thread does them)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Hashable, CloseReason]] = []
        self._cond = threading.Condition()

    def __call__(self, owner: str, name: Hashable, reason: CloseReason) -> None:
        with self._cond:
            self.seen.append((owner, name, reason))
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 10.0) -> list[tuple[str, Hashable, CloseReason]]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.seen) >= count, timeout), self.seen
            return list(self.seen)


def pool(**limits: object) -> tuple[SessionPool[Door], Closes]:
    made: SessionPool[Door] = SessionPool(PoolLimits(**limits), what="session")  # type: ignore[arg-type]
    closes = Closes()
    made.add_listener(closes)
    return made, closes


def test_a_full_owner_makes_room_among_its_own_idle_sessions_only() -> None:
    sessions, closes = pool(max_sessions=3, max_per_owner=2, idle_timeout=None)
    a = sessions.acquire("A", "a", lambda: Door("a"))  # A's call is in flight all along
    for name in ("b1", "b2", "b3"):
        sessions.acquire("B", name, lambda name=name: Door(name)).release()
    assert closes.wait(1) == [("B", "b1", "evicted")]  # B's own least recently used, never A's
    assert sessions.names("B") == ["b2", "b3"] and sessions.names("A") == ["a"]
    with pytest.raises(SessionLimitError) as refused:
        sessions.acquire("C", "c", lambda: Door("c"))
    assert str(refused.value) == (
        "session 'c' cannot be opened: 3 sessions are open in all and none of this caller's is idle "
        "(max_sessions=3); wait for a call to finish, or reuse an open session"
    )
    assert not a.value.closed.is_set()
    a.release()


def test_a_session_with_a_call_in_flight_is_never_evicted() -> None:
    sessions, _ = pool(max_sessions=4, max_per_owner=1, names={"max_per_owner": "--max-client-sessions"})
    held = sessions.acquire("A", "a", lambda: Door("a"))
    with pytest.raises(SessionLimitError, match=r"1 sessions are open for this caller and each has a call in flight"):
        sessions.acquire("A", "b", lambda: Door("b"))
    with pytest.raises(SessionLimitError, match=r"\(--max-client-sessions=1\)"):
        sessions.acquire("A", "b", lambda: Door("b"))
    assert not held.value.closed.is_set()
    held.release()
    sessions.acquire("A", "b", lambda: Door("b")).release()  # now "a" is idle and makes room
    assert held.value.closed.wait(10)


def test_the_idle_timer_closes_a_session_without_another_call() -> None:
    sessions, closes = pool(idle_timeout=0.2)
    lease = sessions.acquire("A", "a", lambda: Door("a"))
    lease.release()
    assert closes.wait(1) == [("A", "a", "idle_timeout")]
    assert lease.value.closed.is_set() and len(sessions) == 0


def test_idle_time_does_not_run_during_a_call_and_restarts_after_it() -> None:
    clock = [0.0]
    sessions: SessionPool[Door] = SessionPool(PoolLimits(idle_timeout=5.0, max_lifetime=None), clock=lambda: clock[0])
    lease = sessions.acquire("A", "a", lambda: Door("a"))
    clock[0] = 100.0  # a long call: never idle while it runs
    second = sessions.acquire("A", "a", lambda: Door("other"))
    assert second.value is lease.value
    second.release()
    lease.release()
    clock[0] = 104.0  # 4 s after the call: not yet idle; released again at 104
    again = sessions.acquire("A", "a", lambda: Door("other"))
    assert again.value is lease.value
    again.release()
    clock[0] = 109.5  # 5.5 s after the last call
    assert sessions.acquire("A", "a", lambda: Door("fresh")).value.name == "fresh"
    assert lease.value.closed.wait(10)


def test_a_lifetime_that_ends_mid_call_closes_the_session_after_the_call() -> None:
    clock = [0.0]
    sessions: SessionPool[Door] = SessionPool(PoolLimits(max_lifetime=60.0, idle_timeout=None), clock=lambda: clock[0])
    closes = Closes()
    sessions.add_listener(closes)
    lease = sessions.acquire("A", "a", lambda: Door("a"))
    clock[0] = 61.0  # past its lifetime, mid-call
    fresh = sessions.acquire("A", "a", lambda: Door("fresh"))  # the next call gets a new session...
    assert fresh.value.name == "fresh"
    assert not lease.value.closed.is_set()  # ...while the old one is not closed under its call
    lease.release()
    assert closes.wait(1) == [("A", "a", "max_lifetime")]
    assert lease.value.closed.is_set()
    fresh.release()


def test_the_lifetime_timer_closes_an_idle_session_on_its_own() -> None:
    sessions, closes = pool(max_lifetime=0.3, idle_timeout=None)
    sessions.acquire("A", "a", lambda: Door("a")).release()
    assert closes.wait(1) == [("A", "a", "max_lifetime")]


def test_concurrent_opens_of_one_session_build_it_once() -> None:
    sessions, _ = pool()
    built: list[str] = []
    gate = threading.Event()

    def slow() -> Door:
        gate.wait(10)
        built.append("x")
        return Door("x")

    leases: list[object] = []
    threads = [threading.Thread(target=lambda: leases.append(sessions.acquire("A", "a", slow))) for _ in range(3)]
    for thread in threads:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(10)
    assert built == ["x"] and len(leases) == 3


def test_a_failed_build_leaves_nothing_and_other_options_are_refused() -> None:
    sessions, _ = pool()

    def broken() -> Door:
        raise ConfigurationError("no model")

    with pytest.raises(ConfigurationError, match="no model"):
        sessions.acquire("A", "a", broken)
    assert sessions.names("A") == []
    sessions.acquire("A", "a", lambda: Door("a"), options={"depth": 1}).release()
    with pytest.raises(ConfigurationError, match=r"session 'a' was opened with \{'depth': 1\}"):
        sessions.acquire("A", "a", lambda: Door("a"), options={"depth": 0})


def test_close_owner_and_close() -> None:
    sessions, closes = pool(idle_timeout=None)
    busy = sessions.acquire("A", "a1", lambda: Door("a1"))
    sessions.acquire("A", "a2", lambda: Door("a2")).release()
    sessions.acquire("B", "b", lambda: Door("b")).release()
    sessions.close_owner("A")
    assert closes.wait(1) == [("A", "a2", "owner_ended")]
    assert not busy.value.closed.is_set()
    busy.release()
    assert ("A", "a1", "owner_ended") in closes.wait(2)
    sessions.close()
    assert ("B", "b", "closed") in closes.wait(3) and len(sessions) == 0


def test_close_closes_a_busy_session_at_once_and_only_once() -> None:
    """Issue 24, defect 6: an explicit close ends a call in flight (its engine cancels it), not after it."""
    sessions, closes = pool(idle_timeout=None)
    busy = sessions.acquire("A", "a", lambda: Door("a"))
    sessions.close()
    assert busy.value.closed.is_set() and closes.wait(1) == [("A", "a", "closed")]
    busy.release()
    sessions.close()  # nothing left: the released lease does not close it a second time
    assert closes.seen == [("A", "a", "closed")]


async def test_a_cancelled_async_open_releases_what_it_leased() -> None:
    sessions, _ = pool(max_per_owner=1)
    gate = threading.Event()

    def slow() -> Door:
        gate.wait(10)
        return Door("a")

    opening = asyncio.ensure_future(sessions.alease("A", "a", slow).__aenter__())
    await asyncio.sleep(0)  # let it start its thread
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    gate.set()
    # The lease the thread took is released: the owner's one slot is free for another session.
    async with asyncio.timeout(10):
        while True:
            try:
                async with sessions.alease("A", "b", lambda: Door("b")) as door:
                    assert door.name == "b"
                    break
            except SessionLimitError:
                await asyncio.sleep(0.01)


def test_bad_limits_are_refused_in_the_interfaces_words() -> None:
    with pytest.raises(ConfigurationError, match=r"^max_threads=0 must be an integer >= 1$"):
        PoolLimits(max_sessions=0, names={"max_sessions": "max_threads"})
    with pytest.raises(ConfigurationError, match=r"--session-idle=-1 must be a positive number of seconds or None"):
        PoolLimits(idle_timeout=-1, names={"idle_timeout": "--session-idle"})
    with pytest.raises(ConfigurationError, match="max_lifetime=nan"):
        PoolLimits(max_lifetime=float("nan"))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts the sandbox's processes through /proc")
def test_an_idle_rlm_session_is_closed_and_its_processes_are_gone() -> None:
    watch = ProcessWatch()
    sessions: SessionPool[RLM] = SessionPool(PoolLimits(idle_timeout=0.5))
    closes = Closes()
    sessions.add_listener(closes)

    def build() -> RLM:
        return RLM(backend=ScriptedModel(["```repl\nkept = 1\n```", "FINAL(ok)"]), persistent=True)

    lease = sessions.acquire("A", "a", build)
    assert lease.value.completion("some context", "q").response == "ok"
    assert watch.new(), "the subprocess sandbox is running"
    lease.release()
    closes.wait(1, timeout=30)
    assert watch.new() == set()
