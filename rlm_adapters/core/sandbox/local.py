"""The ``local`` sandbox: the REPL in this process, for trusted code only.

It is the fastest kind and isolates nothing: model code can import anything, read and write files,
open sockets and see every environment variable of this process. Use it for your own code or for
models you trust; the default (``subprocess``) puts a process boundary in between.

What it does do: each cell's output is captured per thread, with no ``os.chdir``. For that, while a
local sandbox is open, ``sys.stdout`` and ``sys.stderr`` are routing streams (`worker.RoutedStream`,
one pair for the whole process, shared by every local sandbox): a cell's thread writes into its own
capture, a thread of the host writes through to the host's stream (into the running cell instead,
when exactly one runs: threads started by model code inherit no capture), text or bytes
(``sys.stdout.buffer``). When the last local sandbox closes, the host's own streams are put back.
`open()` with a relative path lands in the run's own scratch folder, not the caller's working
folder (`os` and `pathlib` calls still see the process's working folder); and a cell past its time
limit is interrupted by raising an exception in its thread, which stops pure-Python loops. Code
blocked inside a C call cannot be interrupted that way, and the REPL is then replaced (its variables
are lost).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import ctypes
import threading
from typing import Any

from rlm_adapters.core.sandbox.base import BudgetSpent, CallError, CellResult, SandboxSetup
from rlm_adapters.core.sandbox.cell_clock import WaitClock, watch
from rlm_adapters.core.sandbox.programs.worker import (
    DEFAULT_CAPTURE_CHARS,
    ROUTING,
    BudgetExhaustedError,
    CallFailed,
    Repl,
)

STOP_GRACE_SECONDS = 2.0


class CellTimeout(KeyboardInterrupt):
    """Raised inside a cell's thread to stop it (a KeyboardInterrupt so `except Exception` won't catch it)."""

    rlm_timeout = True


class LocalSandbox:
    """In-process REPL. See the module docstring for what it does not protect against."""

    kind = "local"

    def __init__(self, *, capture_chars: int = DEFAULT_CAPTURE_CHARS, cell_timeout: float | None = 120.0) -> None:
        self._capture_chars = capture_chars
        self.cell_timeout = cell_timeout
        self._setup: SandboxSetup | None = None
        self._repl: Repl | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._thread_id: int | None = None
        self._context = contextvars.copy_context()
        self._routing = False  # this sandbox holds the process's stream routing (see the module docstring)
        self._clock = WaitClock()  # waits on the host's calls do not count against cell_timeout

    @property
    def isolation(self) -> str:
        """No isolation: the REPL shares this process."""
        return "none (in-process; trusted code only)"

    async def start(self, setup: SandboxSetup) -> None:
        """Create the namespace with the context in it."""
        self._setup = setup
        self._loop = asyncio.get_running_loop()
        # Calls from the cell's thread run in the run's context, so tracing spans and other context
        # variables of the caller (LangChain, LlamaIndex instrumentation) follow sub-calls.
        self._context = contextvars.copy_context()
        if not self._routing:
            ROUTING.hold()
            self._routing = True
        self._new_repl()

    def _new_repl(self) -> None:
        assert self._setup is not None
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rlm-local-cell")
        workdir = str(self._setup.scratch) if self._setup.scratch is not None else None
        self._repl = Repl(self._setup.context.value, self._call, self._setup.tools, self._capture_chars, workdir)
        self._repl.add_values(self._setup.values)

    async def _in_run_context(self, kind: str, args: dict[str, Any]) -> Any:
        assert self._setup is not None
        task = asyncio.get_running_loop().create_task(self._setup.handler(kind, args), context=self._context.copy())
        return await task

    def _call(self, kind: str, args: dict[str, Any]) -> Any:
        """Runs in the cell's thread: hand the call to the event loop and wait for its answer."""
        assert self._loop is not None and self._setup is not None
        future: concurrent.futures.Future[Any] = asyncio.run_coroutine_threadsafe(
            self._in_run_context(kind, args), self._loop
        )
        self._clock.begin()
        try:
            return future.result()
        except BudgetSpent as exc:
            raise BudgetExhaustedError(str(exc)) from None
        except CallError as exc:
            raise CallFailed(str(exc)) from None
        except concurrent.futures.CancelledError:
            raise CallFailed("the run was cancelled") from None
        finally:
            self._clock.end()

    def _run_cell(self, code: str) -> dict[str, Any]:
        self._thread_id = threading.get_ident()
        assert self._repl is not None
        try:
            return self._repl.execute(code)
        finally:
            self._thread_id = None

    async def execute(self, code: str, timeout: float | None) -> CellResult:
        """Run a cell in the REPL's thread, interrupting it once the run's `timeout` passes or it has computed
        for the cell timeout (time waiting on the host's calls not counted: `cell_clock`)."""
        assert self._loop is not None and self._executor is not None
        future = self._loop.run_in_executor(self._executor, self._run_cell, code)
        try:
            outcome = await watch(future, self._clock, timeout, self.cell_timeout)
        except asyncio.CancelledError:
            self._interrupt()
            raise
        if outcome == "run_time":
            return await self._stop_cell(future, f"the run's time ({timeout:g} s) ran out")
        if outcome == "cell_timeout":
            limit = f"its limit of {self.cell_timeout:g} s (cell_timeout; waiting on model calls does not count)"
            return await self._stop_cell(future, f"it computed past {limit}")
        return CellResult.from_message(future.result())

    def _interrupt(self) -> None:
        if self._thread_id is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread_id), ctypes.py_object(CellTimeout))

    async def _stop_cell(self, future: asyncio.Future[dict[str, Any]], why: str) -> CellResult:
        self._interrupt()
        message = f"the cell was stopped: {why}"
        try:
            finished = await asyncio.wait_for(asyncio.shield(future), STOP_GRACE_SECONDS)
        except TimeoutError:
            # Stuck in C code: abandon that thread (it is trusted code) and start a fresh REPL.
            if self._executor is not None:
                self._executor.shutdown(wait=False, cancel_futures=True)
            self._new_repl()
            return CellResult(
                output="",
                error=f"{message}; the REPL was restarted and your variables were lost (`context` is still loaded)",
                timed_out=True,
                variables_lost=True,
            )
        result = CellResult.from_message(finished)
        result.error = f"{message}; your variables survived"
        result.timed_out = True
        return result

    async def aclose(self) -> None:
        """Drop the namespace; a cell still running is interrupted. The last local sandbox to close puts the
        host's ``sys.stdout`` / ``sys.stderr`` back."""
        if self._executor is not None:
            self._interrupt()
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._repl = None
        if self._routing:
            self._routing = False
            ROUTING.release()
