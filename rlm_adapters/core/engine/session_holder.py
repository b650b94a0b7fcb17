"""The persistent session one `RLM(persistent=True)` owns: opened by its first call, run on its own loop.

Every run of the session comes through here (`complete` from sync code, `run` from async code)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import weakref
from collections.abc import Coroutine
from typing import Any

from rlm_adapters.core.cleanup import close_shielded
from rlm_adapters.core.engine.handle import RunHandle
from rlm_adapters.core.engine.run import Engine, RunRequest, execute
from rlm_adapters.core.engine.session import Session
from rlm_adapters.core.events import Callback, EventBus
from rlm_adapters.core.result import RLMResult
from rlm_adapters.errors import ConfigurationError


class SessionHolder:
    """Holds an RLM's `Session`: opens it (again, once closed) for a call, runs calls on its loop, closes it."""

    def __init__(self) -> None:
        # The session itself (a thread and a loop) starts with the first call.
        self.session: Session | None = None
        self._lock = threading.Lock()

    def open(self, engine: Engine) -> Session:
        """The session, started with `engine`'s settings when there is none (or it was closed)."""
        with self._lock:
            if self.session is None or self.session.closed:
                settings = engine.settings
                self.session = Session(
                    context_alias=settings.context_alias,
                    idle_timeout=settings.session_idle_timeout,
                    max_lifetime=settings.session_max_lifetime,
                )
                # A persistent RLM dropped without close() still closes its sandbox (at the latest, at exit).
                weakref.finalize(engine, self.session.close_quietly)
            return self.session

    def complete(self, engine: Engine, request: RunRequest) -> RLMResult:
        """Run from sync code: on the session's loop, this thread waiting for the result.

        Raises:
            ConfigurationError: Called from the session's own loop (a callback of its run), which would wait
                for itself.
        """
        session = self.open(engine)
        if session.runner.in_loop():
            raise ConfigurationError("a persistent RLM cannot be called from inside its own run")
        return session.runner.submit(execute(engine, dataclasses.replace(request, session=session))).result()

    async def run(self, engine: Engine, request: RunRequest) -> RLMResult:
        """Run on the session's own loop (where its sandbox lives), from whatever loop the caller is in.

        The caller's cancel event stops the run; its callbacks get the run's events on the caller's loop, in order.
        """
        session = self.open(engine)
        if session.runner.in_loop():
            return await execute(engine, dataclasses.replace(request, session=session))

        def work(put: Callback, cancel: asyncio.Event) -> Coroutine[Any, Any, RLMResult]:
            return execute(engine, dataclasses.replace(request, session=session, cancel_event=cancel, callbacks=(put,)))

        handle = RunHandle(work, thread=session.runner)
        relay = None if request.cancel_event is None else asyncio.ensure_future(request.cancel_event.wait())

        def relay_cancel(waited: asyncio.Future[Any]) -> None:
            if not waited.cancelled():
                handle.cancel()

        if relay is not None:
            relay.add_done_callback(relay_cancel)
        try:
            bus = EventBus(list(request.callbacks))  # a failing callback is logged, as on the run's own loop
            async for event in handle.events():
                await bus.emit(event)
            return await handle.result()
        finally:
            if relay is not None:
                relay.cancel()
            if not handle.done():  # the caller was cancelled: so is the run, waited for to its end
                await close_shielded(handle.aclose())

    def close(self) -> None:
        """Close the session's sandbox, if one is open. Safe to call twice."""
        with self._lock:
            session, self.session = self.session, None
        if session is not None:
            session.close()
