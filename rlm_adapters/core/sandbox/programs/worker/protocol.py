"""The worker's side of the one framed protocol it speaks with the host.

    frame = 4-byte big-endian length + UTF-8 JSON object

host -> worker: ``init`` (context file, tools, values, limits), ``exec`` (a cell), ``reply`` (to a call),
``interrupt`` (stop the running cell: its cell_timeout passed), ``shutdown``
worker -> host: ``ready``, ``result`` (of a cell), ``final`` (the answer, sent the moment FINAL / FINAL_VAR
is called, so it survives a worker that dies or hangs after), ``call`` (a sub-call or tool call, tagged with
an id so that threads inside user code may call concurrently)

The framing functions and limits are the host's too (`core/sandbox/channel.py` and `frames.py` import
them), so both ends cut and bound frames the same way. `WorkerChannel` is the worker's end: a reader
thread hands replies to the threads waiting on their calls and cells to the main loop.
"""

from __future__ import annotations

import itertools
import json
import struct
import sys
import threading
from collections.abc import Callable

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 512 * 1024 * 1024
# The most JSON values (`count_values`) one frame from the worker may hold: the host refuses more unparsed.
MAX_FRAME_VALUES = 1_000_000


class ProtocolError(Exception):
    """A frame was malformed or cut short."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """Serialise one message as a frame."""
    body = json.dumps(message, ensure_ascii=False, default=repr).encode("utf-8", "surrogatepass")
    if len(body) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(body):,} bytes exceeds the {MAX_FRAME_BYTES:,}-byte limit")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes, parse_int: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """Parse a frame's body (`parse_int`: as for `json.loads`)."""
    try:
        message = json.loads(body.decode("utf-8", "surrogatepass"), parse_int=parse_int)
    except ValueError as exc:  # not UTF-8, not JSON, an integer past the digit limit
        raise ProtocolError(f"frame is not valid JSON: {str(exc)[:200]}") from None
    except RecursionError:
        raise ProtocolError("frame nests too deeply") from None
    if not isinstance(message, dict) or "type" not in message:
        raise ProtocolError(f"frame is not a message object: {str(message)[:80]!r}")
    return message


def count_values(body: bytes, limit: int) -> int:
    """How many JSON values `body` holds, counted as 1 + the commas and opening brackets outside strings
    (and at most one more than `limit`, past which counting stops).

    Linear and in C-speed passes whatever the body holds (parsing a frame of a million empty lists costs
    a JSON parser far more than its bytes suggest): the cheap count over the whole body first; only when
    that passes `limit` (commas inside long texts) the exact one, string by string.
    """
    upper = 1 + body.count(b",") + body.count(b"[") + body.count(b"{")
    if upper <= limit:
        return upper
    # Drop escaped backslashes, then escaped quotes: every quote left opens or closes a string (JSON
    # pairs escapes left to right, as `replace` does; past anything else the parser refuses the frame).
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = plain.count(b'"') // 2
    if strings > limit:
        return strings
    count, start = 1, 0
    while count <= limit:
        quote = plain.find(b'"', start)
        end = len(plain) if quote < 0 else quote
        count += plain.count(b",", start, end) + plain.count(b"[", start, end) + plain.count(b"{", start, end)
        close = plain.find(b'"', quote + 1) if quote >= 0 else -1
        if close < 0:
            break
        start = close + 1
    return count


def read_frame(stream: IO[bytes]) -> dict[str, Any] | None:
    """Read one frame from a blocking binary stream; None at a clean end of stream."""
    header = stream.read(HEADER.size)
    if not header:
        return None
    if len(header) < HEADER.size:
        raise ProtocolError("stream ended inside a frame header")
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"announced frame of {length:,} bytes exceeds the limit")
    body = b""
    while len(body) < length:
        chunk = stream.read(length - len(body))
        if not chunk:
            raise ProtocolError(f"stream ended after {len(body)} of {length} frame bytes")
        body += chunk
    return decode_body(body)


class CallFailed(RuntimeError):
    """A sub-call or tool call failed on the host; the message says why."""


class BudgetExhaustedError(RuntimeError):
    """The run's budget is spent: no more sub-calls can be made in this run."""


class WorkerChannel:
    """The program side of the protocol: frames in on one stream, out on another."""

    def __init__(self, inbound: IO[bytes], outbound: IO[bytes]) -> None:
        self._in = inbound
        self._out = outbound
        self._write_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._waiting: dict[int, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self._waiting_lock = threading.Lock()
        self.cells: list[dict[str, Any]] = []
        self._cell_ready = threading.Condition()
        self.closed = False
        # Called on the reader thread with the cell id of an ``interrupt`` frame (the host's cell_timeout).
        self.on_interrupt: Callable[[Any], None] | None = None
        self.shutdown_asked = False  # the host said stop: the end of its stream that follows is no surprise

    def send(self, message: dict[str, Any]) -> None:
        self._write(encode_frame(message))

    def _write(self, frame: bytes) -> None:
        with self._write_lock:
            self._out.write(frame)
            self._out.flush()

    def call(self, kind: str, args: dict[str, Any]) -> Any:
        """Send a call to the host and block this thread until its reply arrives."""
        call_id = next(self._ids)
        frame = encode_frame({"type": "call", "id": call_id, "kind": kind, "args": args})
        # The host refuses such a frame unread (and restarts the worker): say so here instead.
        if len(frame) > MAX_FRAME_VALUES and count_values(frame, MAX_FRAME_VALUES) > MAX_FRAME_VALUES:
            raise CallFailed(
                f"{kind}: its arguments hold more than {MAX_FRAME_VALUES:,} JSON values (strings, numbers, "
                "list items...), more than one call may carry to the host; send fewer, larger pieces"
            )
        event = threading.Event()
        slot: list[dict[str, Any]] = []
        with self._waiting_lock:
            self._waiting[call_id] = (event, slot)
        self._write(frame)
        event.wait()
        reply = slot[0]
        if reply.get("ok"):
            return reply.get("value")
        message = str(reply.get("error", "the host refused the call"))
        if reply.get("error_type") == "budget":
            raise BudgetExhaustedError(message)
        raise CallFailed(message)

    def read_loop(self) -> None:
        """Reader thread: hand replies to waiting calls, cells to the main thread."""
        try:
            while True:
                message = read_frame(self._in)
                if message is None:
                    break
                kind = message["type"]
                if kind == "reply":
                    with self._waiting_lock:
                        waiter = self._waiting.pop(int(message["id"]), None)
                    if waiter is not None:
                        waiter[1].append(message)
                        waiter[0].set()
                elif kind == "interrupt":
                    if self.on_interrupt is not None:
                        self.on_interrupt(message.get("id"))
                elif kind in ("exec", "shutdown"):
                    self.shutdown_asked = self.shutdown_asked or kind == "shutdown"
                    with self._cell_ready:
                        self.cells.append(message)
                        self._cell_ready.notify()
        except ProtocolError as exc:
            print(f"rlm worker: {exc}", file=sys.__stderr__)
        finally:
            self.closed = True
            with self._waiting_lock:
                for event, slot in self._waiting.values():
                    slot.append({"ok": False, "error": "the host closed the connection"})
                    event.set()
            with self._cell_ready:
                self.cells.append({"type": "shutdown"})
                self._cell_ready.notify()

    def next_command(self) -> dict[str, Any]:
        with self._cell_ready:
            while not self.cells:
                self._cell_ready.wait()
            return self.cells.pop(0)
