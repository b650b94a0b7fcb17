"""Stopping `rlm serve` on Ctrl-C (SIGINT) or SIGTERM: first the runs in flight finish, then they are stopped.

uvicorn's own handling waits silently for the requests in flight on the first signal, and on a second Ctrl-C
exits with `KeyboardInterrupt` and `CancelledError` tracebacks while clients get a bare 500. Here the first
signal says what the server waits for and how to stop now; the second (or the end of `GRACE_SECONDS`) cancels
every run as a client's cancel does (its sandbox closed, its paid calls counted as cut), each client gets
OpenAI's error shape naming the shutdown (a streaming one an error event, then the stream's end), and the
server exits without a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from rlm_adapters.serve.app import Server

# How long the first signal waits for the runs in flight before stopping them as a second one would.
GRACE_SECONDS = 30
STARTUP_FAILURE = 3  # uvicorn's exit code when the server could not start (the port taken, say)


def serve_until_stopped(app: Starlette, *, host: str, port: int, http: type[asyncio.Protocol]) -> int:
    """Serve `app` (built by `build_app`) until signals stop it.

    Returns:
        0 after a clean stop; 130 (interrupted) when runs in flight were stopped before their answer;
        `STARTUP_FAILURE` when the server could not start (uvicorn has logged why).
    """
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=GRACE_SECONDS + 30,  # a backstop: the runs are stopped after GRACE_SECONDS
        http=http,
    )
    server = StoppingServer(config, app.state.server)
    server.run()
    if not server.started:
        return STARTUP_FAILURE
    return server.exit_code


class StoppingServer(uvicorn.Server):
    """uvicorn's server, stopped in two steps on signals (see the module's docstring).

    Args:
        config: uvicorn's configuration of the app.
        runs: The app's `Server`: its runs in flight are counted, waited for, and stopped.
    """

    def __init__(self, config: uvicorn.Config, runs: Server) -> None:
        super().__init__(config)
        self.runs = runs
        self.cut = False  # runs were stopped before they finished
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    @property
    def exit_code(self) -> int:
        """0 after a clean stop; 130 (interrupted) when runs in flight were stopped before their answer."""
        return 130 if self.cut else 0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: it re-raises the signal once stopped (a KeyboardInterrupt traceback) and forces an
        # exit on a second Ctrl-C (cancelling every request mid-write).
        if not self.should_exit:
            self.should_exit = True
            flight = self.runs.admitted
            if flight:
                say(
                    f"stopping: waiting for {flight} run{'s' if flight != 1 else ''} in flight to finish (at most "
                    f"{GRACE_SECONDS:g} s); press Ctrl-C again to stop {'them' if flight != 1 else 'it'} now"
                )
                self._on_loop(lambda: self._grace(GRACE_SECONDS))
            else:
                say("stopping")
            return
        if not self.cut:
            self._stop_runs()
        else:  # a third: stop waiting for the connections (what a run still does is cut off at exit)
            self.force_exit = True

    def _grace(self, seconds: float) -> None:
        assert self._loop is not None
        self._loop.call_later(seconds, self._stop_runs)

    def _stop_runs(self) -> None:
        if self.cut:
            return
        self.cut = True
        flight = self.runs.admitted
        if flight:
            say(f"stopping {flight} run{'s' if flight != 1 else ''} now: each client gets an error naming the shutdown")
        self._on_loop(self.runs.stop_runs)

    def _on_loop(self, callback: Callable[[], None]) -> None:
        # A signal handler runs between two bytecodes of the loop's own thread: hand the work to the loop.
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has ended: nothing is left to stop
                self._loop.call_soon_threadsafe(callback)


def say(line: str) -> None:
    """One line on stderr, as `rlm serve` words its messages."""
    print(f"rlm serve: {line}", file=sys.stderr, flush=True)


__all__ = ["GRACE_SECONDS", "STARTUP_FAILURE", "StoppingServer", "serve_until_stopped"]
