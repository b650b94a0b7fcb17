"""The host side of the worker protocol over any pair of async byte streams.

Every out-of-process sandbox (subprocess, Docker, E2B) starts the same worker program and hands this
channel its two streams; the sandboxes differ only in how they start the worker and carry the bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from rlm_adapters.core.budget import BudgetExhausted
from rlm_adapters.core.sandbox.base import CallError, CallHandler
from rlm_adapters.core.sandbox.worker import HEADER, MAX_FRAME_BYTES, ProtocolError, decode_body, encode_frame

logger = logging.getLogger("rlm_adapters.sandbox")

KNOWN_CALLS = frozenset({"llm_query", "llm_query_batched", "rlm_query", "rlm_query_batched", "tool"})


class ByteReader(Protocol):
    """What the channel reads from (an `asyncio.StreamReader` fits)."""

    async def readexactly(self, n: int) -> bytes: ...


class WorkerGone(Exception):
    """The worker's stream ended (it exited, crashed or was killed)."""


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
        self._results: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._cell_ids = itertools.count(1)
        self._calls: set[asyncio.Task[None]] = set()
        self._reader_task: asyncio.Task[None] | None = None
        self.closed_reason: str | None = None

    async def start(self, init: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send the init frame and wait for the worker's ``ready``."""
        self._reader_task = asyncio.create_task(self._read_loop(), name="rlm-worker-reader")
        await self.send({"type": "init", **init})
        ready = await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        if not ready.get("ok", False):
            raise WorkerGone(str(ready.get("error", "the worker could not start")))
        return ready

    async def send(self, message: dict[str, Any]) -> None:
        """Write one frame."""
        frame = encode_frame(message)
        async with self._write_lock:
            await self._write(frame)

    async def execute(self, code: str) -> dict[str, Any]:
        """Run one cell and wait for its result (no timeout here: the sandbox decides)."""
        if self.closed_reason is not None:
            raise WorkerGone(self.closed_reason)
        cell_id = next(self._cell_ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._results[cell_id] = future
        try:
            await self.send({"type": "exec", "id": cell_id, "code": code})
            return await future
        finally:
            self._results.pop(cell_id, None)

    async def _read_frame(self) -> dict[str, Any]:
        header = await self._reader.readexactly(HEADER.size)
        (length,) = HEADER.unpack(header)
        if length > MAX_FRAME_BYTES:
            raise ProtocolError(f"the worker announced a frame of {length:,} bytes")
        return decode_body(await self._reader.readexactly(length))

    async def _read_loop(self) -> None:
        reason = "the worker exited"
        try:
            while True:
                message = await self._read_frame()
                kind = message.get("type")
                if kind == "ready" and not self._ready.done():
                    self._ready.set_result(message)
                elif kind == "result":
                    future = self._results.get(int(message.get("id") or 0))
                    if future is not None and not future.done():
                        future.set_result(message)
                elif kind == "call":
                    task = asyncio.create_task(self._answer(message))
                    self._calls.add(task)
                    task.add_done_callback(self._calls.discard)
                else:
                    logger.warning("ignoring a worker frame of unknown type %r", kind)
        except asyncio.IncompleteReadError:
            reason = "the worker exited"
        except ProtocolError as exc:
            reason = f"the worker sent a malformed frame ({exc})"
        except (ConnectionError, OSError) as exc:
            reason = f"the connection to the worker broke ({exc})"
        except asyncio.CancelledError:
            reason = "the sandbox was closed"
            raise
        finally:
            self.closed_reason = reason
            gone = WorkerGone(reason)
            if not self._ready.done():
                self._ready.set_exception(gone)
            for future in self._results.values():
                if not future.done():
                    future.set_exception(gone)

    async def _answer(self, message: dict[str, Any]) -> None:
        call_id = message.get("id")
        kind = message.get("kind")
        args = message.get("args")
        reply: dict[str, Any]
        if kind not in KNOWN_CALLS or not isinstance(args, dict):
            reply = {"ok": False, "error": f"unknown call {kind!r} (or arguments not an object)"}
        else:
            try:
                reply = {"ok": True, "value": await self._handler(str(kind), args)}
            except BudgetExhausted as exc:
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
