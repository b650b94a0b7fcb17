"""Persistent sessions: one sandbox kept across `RLM.completion` calls (``RLM(persistent=True)``).

The first run starts the sandbox as usual; every later run adds its context to the same REPL as
``context_1``, ``context_2``, ... and every finished conversation becomes ``history_0``, ... . The sandbox
is the same object with the same walls for its whole life: nothing is loosened to keep it alive.

A sandbox is bound to the event loop it was started in, while the sync `completion()` runs each call in a
fresh loop. So a session owns one private event loop on a daemon thread (a `LoopThread`) and every run of the
session executes there, whichever way it was called; idle and total lifetime limits are timers on that loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from rlm_adapters.core.cleanup import close_shielded
from rlm_adapters.core.engine.loop_thread import LoopThread
from rlm_adapters.core.engine.session_replay import SessionTurn
from rlm_adapters.core.lm import Message
from rlm_adapters.core.sandbox import (
    SESSION_TOOL,
    CallError,
    CallHandler,
    Sandbox,
    SandboxSetup,
    new_folder,
    open_sandbox,
)
from rlm_adapters.core.settings import ContextAlias, RLMSettings
from rlm_adapters.errors import ConfigurationError, SandboxError


def check_session_options(*, context_alias: str, idle_timeout: float | None, max_lifetime: float | None) -> None:
    """Raise `ConfigurationError` for a bad session option."""
    for name, value in (("session_idle_timeout", idle_timeout), ("session_max_lifetime", max_lifetime)):
        if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or value <= 0):
            raise ConfigurationError(f"{name}={value!r} must be a positive number of seconds or None")
    if context_alias not in ("latest", "first"):
        raise ConfigurationError(f"context_alias={context_alias!r} must be 'latest' or 'first'")


class Session:
    """The sandbox and bookkeeping of one persistent RLM.

    Args:
        context_alias: What ``context`` / ``history`` name: the latest one (ours) or the first (the reference's).
        idle_timeout: Close the sandbox after this many seconds without a run (None: never).
        max_lifetime: Close the sandbox this many seconds after it started (None: never); a run in progress
            finishes first.
    """

    def __init__(
        self,
        *,
        context_alias: ContextAlias = "latest",
        idle_timeout: float | None = None,
        max_lifetime: float | None = None,
    ) -> None:
        check_session_options(context_alias=context_alias, idle_timeout=idle_timeout, max_lifetime=max_lifetime)
        self.context_alias: ContextAlias = context_alias
        self.idle_timeout = idle_timeout
        self.max_lifetime = max_lifetime
        self.runner = LoopThread("rlm-session", daemon=True)
        self.sandbox: Sandbox | None = None
        self.context_count = 0
        self.history_count = 0
        self.ended: str | None = None  # why the last sandbox was closed, reported on the next run
        # The runs that made the sandbox's state, to rebuild it elsewhere (`core/engine/session_replay.py`).
        self.turns: list[SessionTurn] = []
        self.pending_turn: SessionTurn | None = None  # the run in progress, kept by `finish` with its sandbox
        self._handler: CallHandler | None = None
        self._pending_contexts: list[Any] = []
        self._pending_histories: list[list[Message]] = []
        self._scratch: Path | None = None
        self._lock: asyncio.Lock | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._busy = False
        self._expired: str | None = None
        self._pending_expiry: asyncio.Future[None] | None = None
        self._stops: set[asyncio.Event] = set()  # one per run begun or waiting: set when the session closes
        self._drained: asyncio.Event | None = None  # set once the last of them has ended
        self.closed = False

    # -- used by the run loop (on the session loop) ---------------------------------------------------
    @contextlib.asynccontextmanager
    async def guard(self, cancel_event: asyncio.Event | None) -> AsyncIterator[asyncio.Event]:
        """The cancel event of one run of the session: set by the caller's `cancel_event`, or when the
        session closes (`close` from another thread), so that a close ends a running call as cancelled."""
        stop = asyncio.Event()
        if self.closed:
            stop.set()
        relay = None if cancel_event is None else asyncio.ensure_future(cancel_event.wait())

        def relay_done(done: asyncio.Future[Any]) -> None:
            if not done.cancelled():
                stop.set()

        if relay is not None:
            relay.add_done_callback(relay_done)
        self._stops.add(stop)
        try:
            yield stop
        finally:
            try:
                if relay is not None:
                    relay.cancel()
                    await asyncio.gather(relay, return_exceptions=True)
            finally:
                # Only now is the run over: `_close` (and the loop's stop after it) waits for this.
                self._stops.discard(stop)
                if not self._stops and self._drained is not None:
                    self._drained.set()

    def lock(self) -> asyncio.Lock:
        """Runs of one session go one at a time."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    @property
    def started(self) -> bool:
        """True while a sandbox is alive."""
        return self.sandbox is not None

    def scratch(self) -> Path:
        """The session's own scratch folder (it outlives each run's temporary files)."""
        if self._scratch is None:
            self._scratch = new_folder("session")  # named after this process: swept if it is killed
        return self._scratch

    async def dispatch(self, kind: str, args: dict[str, Any]) -> Any:
        """The handler the sandbox was started with: forwards to the current run's broker."""
        if kind == "tool" and args.get("name") == SESSION_TOOL:
            contexts, self._pending_contexts = self._pending_contexts, []
            histories, self._pending_histories = self._pending_histories, []
            return {"contexts": contexts, "histories": histories, "alias": self.context_alias}
        if self._handler is None:
            raise CallError("no run is active in this session")
        return await self._handler(kind, args)

    def lease(self, settings: RLMSettings, turn: SessionTurn) -> SessionSandbox:
        """The session as the `SandboxLease` of one run's top level (`turn`), under the session's lock.

        Args:
            settings: The run's settings (its sandbox, when the session has none yet).
            turn: What the run was asked, kept in `turns` with the sandbox when the run ends well.
        """
        restarted, self.ended = self.ended, None
        self.pending_turn = turn
        return SessionSandbox(self, settings, restarted)

    async def begin(self, sandbox: Sandbox, setup: SandboxSetup) -> None:
        """Start the session's sandbox for the first run, or add this run's context to the running one.

        Args:
            sandbox: A new sandbox, used only when the session has none yet.
            setup: The run's sandbox setup (its handler becomes the current one).
        """
        if self.closed:  # a run that was waiting for the lock when the session closed
            raise SandboxError("the persistent session was closed")
        self._cancel_timers()
        self._busy = True
        self._handler = setup.handler
        if self.sandbox is None:
            self.sandbox = sandbox
            # The sandbox outlives this run: it answers through the session and keeps the session's folder.
            await sandbox.start(dataclasses.replace(setup, handler=self.dispatch, scratch=self.scratch()))
            self.context_count = 1
            self.history_count = 0
            if self.max_lifetime is not None:
                loop = asyncio.get_running_loop()
                self._timers.append(loop.call_later(self.max_lifetime, self._expire, "max_lifetime"))
            return
        self._pending_contexts.append(setup.context.value)
        await self._pull()
        self.context_count += 1

    async def finish(self, messages: list[Message] | None, broken: bool) -> None:
        """After a run: keep its conversation as ``history_N`` (and the run in `turns`), or drop a sandbox the
        run left broken."""
        self._handler = None
        self._busy = False
        turn, self.pending_turn = self.pending_turn, None
        if broken or self._expired is not None:
            await self.reset(self._expired or "the previous run ended with a sandbox error")
            return
        if messages is not None and self.sandbox is not None:
            # Pulled in with the next run's context (one cell, not two): the sandbox stays at rest until then.
            self._pending_histories.append([{"role": m["role"], "content": m["content"]} for m in messages])
            self.history_count += 1
        if turn is not None and self.sandbox is not None:
            self.turns.append(turn)
        if self.idle_timeout is not None:
            loop = asyncio.get_running_loop()
            self._timers.append(loop.call_later(self.idle_timeout, self._expire, "idle_timeout"))

    async def reload(self, context: Any) -> None:
        """After the worker restarted (its variables lost, only the first context loaded again): load this
        run's context again, so that ``context`` is the right one. Earlier contexts and histories are gone;
        the counts say so to the next run."""
        self.history_count = 0
        if self.context_count <= 1:
            return
        self._pending_contexts, self._pending_histories = [context], []
        await self._pull()
        self.context_count = 2

    async def _pull(self) -> None:
        assert self.sandbox is not None
        cell = await self.sandbox.execute(f"{SESSION_TOOL}.pull()", None)
        if cell.error:
            raise SandboxError(f"the persistent session could not load the new context: {cell.error}")

    def _expire(self, reason: str) -> None:
        self._expired = f"the session reached its {reason}"
        self._pending_expiry = asyncio.ensure_future(self._expire_between_runs())

    async def _expire_between_runs(self) -> None:
        # Under the runs' lock: a run that has begun keeps its sandbox, and `finish` closes it after.
        async with self.lock():
            if self._expired is not None and not self._busy:
                await self.reset(self._expired)

    def _cancel_timers(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    async def reset(self, reason: str) -> None:
        """Close the sandbox; the next run starts a fresh one (and is told why in its metadata)."""
        self._cancel_timers()
        sandbox, self.sandbox = self.sandbox, None
        self._expired = None
        self._pending_contexts.clear()
        self._pending_histories.clear()
        if sandbox is not None:
            self.ended = reason
            await close_shielded(sandbox.aclose())
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        self.context_count = 0
        self.history_count = 0
        self.turns = []

    async def _close(self) -> None:
        """Cancel the runs in progress or waiting (each ends ``cancelled``), then close the sandbox."""
        for stop in self._stops:
            stop.set()
        while self._stops:  # each run ends first, with its result delivered before the loop stops
            self._drained = asyncio.Event()
            await self._drained.wait()
        async with self.lock():
            await self.reset("closed")

    # -- used by RLM (any thread) ----------------------------------------------------------------------
    def close_quietly(self) -> None:
        """`close` for a finalizer: never raises, and from the session's own thread only schedules it."""
        if self.closed:
            return
        if self.runner.in_loop():
            self.closed = True
            asyncio.ensure_future(self._close()).add_done_callback(lambda _t: self.runner.stop())
            return
        try:
            self.close()
        except Exception:  # a finalizer must not raise; the worker processes die with this process anyway
            self.runner.stop()

    def close(self) -> None:
        """Close the sandbox and stop the session's loop; a call running meanwhile returns ``cancelled``
        (promptly: its cell is stopped). Safe to call twice."""
        if self.closed:
            return
        running = not self.runner.loop.is_closed() and self.runner.loop.is_running()
        if running and self.runner.in_loop():
            raise ConfigurationError("close() a persistent RLM from outside its own callbacks")
        self.closed = True  # a run entering its guard from now on is cancelled at once
        if running:
            self.runner.submit(self._close()).result(timeout=60)
        self.runner.stop()


class SessionSandbox:
    """A persistent session as one run's sandbox lease: the kept sandbox (or a new one the session adopts),
    the session's own scratch folder, and the conversation kept as ``history_N`` after the run."""

    def __init__(self, session: Session, settings: RLMSettings, restarted: str | None) -> None:
        self.session = session
        self.settings = settings
        self.closed_before = restarted  # why the sandbox of the session's last run was closed, if it was
        self.context_alias: str = session.context_alias

    async def acquire(self) -> tuple[Sandbox, tuple[int, int]]:
        session = self.session
        if session.sandbox is not None:
            return session.sandbox, (session.context_count + 1, session.history_count)
        return await open_sandbox(self.settings.environment, dict(self.settings.environment_kwargs)), (1, 0)

    def scratch(self) -> Path:
        return self.session.scratch()

    async def start(self, sandbox: Sandbox, setup: SandboxSetup) -> None:
        await self.session.begin(sandbox, setup)

    async def restarted(self, context: Any) -> None:
        # The worker came back with the session's first context only: hand it this run's again.
        await self.session.reload(context)

    async def end(self, sandbox: Sandbox, messages: list[Message], broken: bool) -> None:
        await self.session.finish(messages or None, broken)

    def describe(self, metadata: dict[str, Any]) -> None:
        session = self.session
        metadata["session"] = {
            "contexts": session.context_count,
            "histories": session.history_count,
            **({"restarted": self.closed_before} if self.closed_before else {}),
        }
