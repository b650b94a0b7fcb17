"""The host side of the worker protocol over any pair of async byte streams.

Every out-of-process sandbox (subprocess, Docker, the cloud ones) starts the same worker program and hands this
channel its two streams; the sandboxes differ only in how they start the worker and carry the bytes.

The worker runs model-written code, so every frame it sends is checked (`frames`) before the host
uses it: a frame of the wrong shape, for a cell or call id the host did not issue, or one too many calls
in flight ends the connection with `WorkerMisbehaved`; the cell ends with an error naming it and the
sandbox restarts the worker. A final answer the worker announced (its ``final`` frame, sent the moment FINAL is
called) is kept even if the worker then dies or hangs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from rlm_adapters.core.sandbox.base import BudgetSpent, CallError, CallHandler, CellResult, FinalAnswer
from rlm_adapters.core.sandbox.cell_clock import WaitClock
from rlm_adapters.core.sandbox.frames import BadFrame, read_body
from rlm_adapters.core.sandbox.programs.worker import HEADER, MAX_FRAME_BYTES, ProtocolError, encode_frame

logger = logging.getLogger("rlm_adapters.sandbox")

KNOWN_CALLS = frozenset({"llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "tool", "call_tool"})
# An honest worker has at most one call in flight per thread (and threads are capped by process_limit).
MAX_CALLS_IN_FLIGHT = 1024
# Frames up to this size are parsed and checked on the event loop (a few ms at worst); larger ones in a
# thread, so that what the loop waits for is bounded by the frame checks' limits, not by what model code sent.
INLINE_FRAME_BYTES = 64 * 1024


class ByteReader(Protocol):
    """What the channel reads from (an `asyncio.StreamReader` fits)."""

    async def readexactly(self, n: int) -> bytes: ...


class WorkerGone(Exception):
    """The worker's stream ended (it exited, crashed or was killed)."""


class WorkerMisbehaved(WorkerGone):
    """The worker sent a frame the host does not accept; the connection is closed and the worker must go."""


class HostChannel:
    """Sends cells to a worker, answers its calls, and reports its results.

    Args:
        reader: The worker's output stream.
        write: Sends bytes to the worker's input.
        handler: Answers the worker's calls (sub-calls, tools).
    """

    def __init__(self, reader: ByteReader, write: Callable[[bytes], Awaitable[None]], handler: CallHandler) -> None:
        self._reader = reader
        self._write = write
        self._handler = handler
        self._write_lock = asyncio.Lock()
        self._ready: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._results: dict[int, asyncio.Future[CellResult]] = {}
        self._cell_ids = itertools.count(1)
        self._calls: set[asyncio.Task[None]] = set()
        self._reader_task: asyncio.Task[None] | None = None
        self._closed: WorkerGone | None = None
        # The final answer announced during the latest cell (kept if the worker dies or hangs after it).
        self.cell_final: FinalAnswer | None = None
        self._cell_id: int | None = None
        # A cell waiting on the host's model calls is not computing: its `cell_timeout` does not count that.
        self.clock = WaitClock()

    async def start(self, init: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send the init frame and wait for the worker's ``ready``."""
        self._reader_task = asyncio.create_task(self._read_loop(), name="rlm-worker-reader")
        await self.send({"type": "init", **init})
        ready = await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        if not ready["ok"]:
            raise WorkerGone(str(ready.get("error") or "the worker could not start"))
        return ready

    async def send(self, message: dict[str, Any]) -> None:
        """Write one frame."""
        frame = encode_frame(message)
        async with self._write_lock:
            await self._write(frame)

    async def execute(self, code: str) -> CellResult:
        """Run one cell and wait for its checked result (no timeout here: the sandbox decides).

        Raises:
            WorkerGone: the worker ended (`WorkerMisbehaved` when it sent a frame the host refused);
                `cell_final` holds a final answer it announced before.
        """
        if self._closed is not None:
            raise self._closed
        cell_id = next(self._cell_ids)
        self.cell_final = None
        future: asyncio.Future[CellResult] = asyncio.get_running_loop().create_future()
        self._results[cell_id] = future
        self._cell_id = cell_id
        try:
            await self.send({"type": "exec", "id": cell_id, "code": code})
            return await future
        finally:
            self._results.pop(cell_id, None)
            self._cell_id = None

    async def interrupt(self) -> None:
        """Ask the worker to stop the running cell (it raises in the cell's code, which keeps its output and
        the variables); the worker ignores it once that cell is over."""
        if self._cell_id is not None and self._closed is None:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                await self.send({"type": "interrupt", "id": self._cell_id})

    async def _read_frame(self) -> tuple[str, Any]:
        """The next frame, parsed and checked (`frames.read_body`): its type and checked content."""
        header = await self._reader.readexactly(HEADER.size)
        (length,) = HEADER.unpack(header)
        if length > MAX_FRAME_BYTES:
            raise ProtocolError(f"the worker announced a frame of {length:,} bytes")
        body = await self._reader.readexactly(length)
        if length <= INLINE_FRAME_BYTES:
            return read_body(body)
        return await asyncio.to_thread(read_body, body)

    async def _read_loop(self) -> None:
        closed: WorkerGone = WorkerGone("the worker exited")
        try:
            while True:
                self._dispatch(*await self._read_frame())
        except asyncio.IncompleteReadError:
            pass
        except (ProtocolError, BadFrame) as exc:
            closed = WorkerMisbehaved(f"the sandbox worker sent an invalid frame ({exc})")
        except (ConnectionError, OSError) as exc:
            closed = WorkerGone(f"the connection to the worker broke ({exc})")
        except asyncio.CancelledError:
            closed = WorkerGone("the sandbox was closed")
            raise
        except Exception as exc:  # never let the reader die silently: a cell would wait for its timeout
            logger.exception("the sandbox channel failed on a worker frame")
            closed = WorkerMisbehaved(f"the sandbox worker sent a frame the host could not handle ({exc!r:.200})")
        finally:
            self._close(closed)

    def _dispatch(self, kind: str, checked: Any) -> None:
        """Act on one checked frame; raises `BadFrame` for anything the host did not ask for."""
        if kind == "ready":
            if self._ready.done():
                raise BadFrame("a second 'ready' frame")
            self._ready.set_result(checked)
        elif kind == "result":
            cell_id, result = checked
            future = self._results.get(cell_id)
            if future is None:
                raise BadFrame(f"a 'result' frame for cell id {cell_id}, which is not running")
            if not future.done():
                future.set_result(result)
        elif kind == "final":
            cell_id, final = checked
            if cell_id not in self._results:
                raise BadFrame(f"a 'final' frame for cell id {cell_id}, which is not running")
            self.cell_final = final
        else:  # "call": `check_frame` lets no other type through
            call_id, call_kind, args = checked
            if len(self._calls) >= MAX_CALLS_IN_FLIGHT:
                raise BadFrame(f"more than {MAX_CALLS_IN_FLIGHT} calls in flight at once")
            task = asyncio.create_task(self._answer(call_id, call_kind, args))
            self.clock.begin()
            self._calls.add(task)
            task.add_done_callback(self._call_done)

    def _call_done(self, task: asyncio.Task[None]) -> None:
        self._calls.discard(task)
        self.clock.end()

    def _close(self, closed: WorkerGone) -> None:
        self._closed = closed
        if not self._ready.done():
            self._ready.set_exception(closed)
        for future in self._results.values():
            if not future.done():
                future.set_exception(closed)

    async def _answer(self, call_id: int, kind: str, args: dict[str, Any]) -> None:
        reply: dict[str, Any]
        if kind not in KNOWN_CALLS:
            reply = {"ok": False, "error": f"unknown call {kind[:80]!r}"}
        else:
            try:
                reply = {"ok": True, "value": await self._handler(str(kind), args)}
            except BudgetSpent as exc:
                reply = {"ok": False, "error": str(exc), "error_type": "budget"}
            except CallError as exc:
                reply = {"ok": False, "error": str(exc)}
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.exception("a call from the REPL failed inside the host")
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        # If the worker is gone, nobody is waiting for this reply any more.
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            await self.send({"type": "reply", "id": call_id, **reply})

    async def aclose(self) -> None:
        """Cancel outstanding calls and stop reading."""
        tasks = [*self._calls]
        if self._reader_task is not None:
            tasks.append(self._reader_task)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
