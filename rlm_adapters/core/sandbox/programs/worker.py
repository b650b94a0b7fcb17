"""The REPL worker: one program, standard library only, run wherever a sandbox starts it.

It keeps a namespace across cells, captures what each cell prints (per thread, so threads started by
user code do not write into another cell's output), and talks to the host over one framed protocol:

    frame = 4-byte big-endian length + UTF-8 JSON object

host -> worker: ``init`` (context file, tools, values, limits), ``exec`` (a cell), ``reply`` (to a call),
``shutdown``
worker -> host: ``ready``, ``result`` (of a cell), ``final`` (the answer, sent the moment FINAL / FINAL_VAR
is called, so it survives a worker that dies or hangs after), ``call`` (a sub-call or tool call, tagged with
an id so that threads inside user code may call concurrently)

Run as a program (``python -I worker.py``) it speaks frames on stdin and on the process's original
stdout; file descriptor 1 is then pointed at stderr so that nothing user code writes can corrupt a frame.
`Repl` is also used in-process by the ``local`` sandbox, with a direct call function.

This file must stay importable on its own (it is bound into bubblewrap, and sent as source into containers
and cloud sandboxes by the bootstrap program): no imports outside the standard library, and no imports
from this package. It is one file by design, over the usual module size: it is shipped as a single
program, and `python -I` does not put the script's folder on sys.path for a sibling import. Its sections
are framing, value encoding, output capture, the REPL and the program.
"""

from __future__ import annotations

import ast
import codecs
import contextlib
import functools
import io
import itertools
import json
import os
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any, TextIO, TypeAlias

    CallFunction: TypeAlias = Callable[[str, dict[str, Any]], Any]

HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 512 * 1024 * 1024
# The most JSON values (`count_values`) one frame from the worker may hold: the host refuses more unparsed.
MAX_FRAME_VALUES = 1_000_000
DEFAULT_CAPTURE_CHARS = 1_000_000
# A final answer longer than this is cut (with a note): it must fit in one frame with room to spare.
MAX_FINAL_CHARS = 64 * 1024 * 1024
# The JSON value of a non-text final answer is kept only up to this size (its text always is).
MAX_FINAL_VALUE_CHARS = 8 * 1024 * 1024
# ... and only up to this many JSON values, so that a frame carrying it stays within MAX_FRAME_VALUES.
MAX_FINAL_VALUES = MAX_FRAME_VALUES // 2
MAX_VARIABLES = 500
# The JSON of one call_tool's arguments may be this long (the host checks the same bound again).
MAX_TOOL_ARGS_CHARS = 1_000_000

RESERVED_NAMES = frozenset(
    {
        "context",
        "prompt",
        "llm_query",
        "llm_query_batched",
        "rlm_query",
        "rlm_query_batched",
        "FINAL",
        "FINAL_VAR",
        "SHOW_VARS",
        "call_tool",
        "answer",
        "history",
        "_rlm_session",
    }
)
# A persistent session's REPL pulls new contexts and histories as a call of this reserved tool name.
SESSION_TOOL = "_rlm_session"
# The prefix of the string a failed llm_query / llm_query_batched slot / rlm_query returns (the reference
# RLM's rule): model code can test ``reply.startswith("Error: ")`` and carry on.
CALL_ERROR_PREFIX = "Error: "


# --------------------------------------------------------------------------------------- framing
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


# ------------------------------------------------------------------------------ value encoding
# Tool arguments, tool return values and plain values given as tools cross the sandbox boundary as
# tagged JSON: the types below come back as themselves on the other side, anything else fails with an
# error naming the value. Nothing is ever unpickled: the host must not run what a sandbox sends it.
TAG = "__rlm_type__"
ENCODABLE = "JSON data, set, frozenset, tuple, bytes, datetime, date, time, timedelta, Decimal, complex"


class ValueEncodingError(TypeError):
    """A value cannot cross the sandbox boundary faithfully."""


def encode_value(value: Any, where: str = "value") -> Any:
    """`value` as JSON-ready data; raises `ValueEncodingError` naming it when that is not possible."""
    import datetime
    import decimal

    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [encode_value(v, where) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: encode_value(v, where) for k, v in value.items()}
        return {TAG: "dict", "items": [[encode_value(k, where), encode_value(v, where)] for k, v in value.items()]}
    if isinstance(value, tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return {TAG: type(value).__name__, "items": [encode_value(v, where) for v in items]}
    if isinstance(value, bytes | bytearray):
        import base64

        return {TAG: "bytes", "b64": base64.b64encode(bytes(value)).decode("ascii")}
    for kind in (datetime.datetime, datetime.date, datetime.time):
        if type(value) is kind:
            return {TAG: kind.__name__, "iso": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {TAG: "timedelta", "seconds": value.total_seconds()}
    if isinstance(value, decimal.Decimal):
        return {TAG: "Decimal", "text": str(value)}
    if isinstance(value, complex):
        return {TAG: "complex", "parts": [value.real, value.imag]}
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise ValueEncodingError(
        f"{where}: the {type(value).__name__} value {shown} cannot cross the sandbox boundary; convert it "
        f"to one of: {ENCODABLE} (e.g. dataclasses.asdict for a dataclass)"
    )


class DecodeBounds:
    """Limits on a value decoded from tagged JSON that a sandbox sent (the host's side: model code wrote it).

    Without them a value of 60,000 integer keys that all hash alike costs the decoder minutes (each
    insertion compares the key with every earlier one): a mapping or set may hold at most
    `max_equal_hashes` keys of one hash value, `max_keys` keys in all; the whole value at most
    `max_items` items, `max_depth` levels, strings and byte strings of `max_chars`.
    """

    def __init__(
        self,
        *,
        max_depth: int = 100,
        max_items: int = 1_000_000,
        max_keys: int = 100_000,
        max_equal_hashes: int = 8,
        max_chars: int = 64 * 1024 * 1024,
    ) -> None:
        self.max_depth = max_depth
        self.max_items = max_items
        self.max_keys = max_keys
        self.max_equal_hashes = max_equal_hashes
        self.max_chars = max_chars


class BoundExceeded(ValueEncodingError):
    """A decoded value passed one of its `DecodeBounds` (`bound` names it)."""

    def __init__(self, bound: str, message: str) -> None:
        super().__init__(message)
        self.bound = bound


# The text of a Decimal or an ISO date: a few characters in an honest value, never megabytes.
MAX_DECIMAL_CHARS = 10_000
MAX_ISO_CHARS = 64


class _Decoding:
    """One `decode_value` call: the builders of each tag, counting what `bounds` limits (if any)."""

    def __init__(self, bounds: DecodeBounds | None) -> None:
        self.bounds = bounds
        self.items = 0

    def _count(self, depth: int) -> None:
        bounds = self.bounds
        if bounds is None:
            return
        self.items += 1
        if self.items > bounds.max_items:
            raise BoundExceeded("max_items", f"the value holds more than {bounds.max_items:,} items")
        if depth > bounds.max_depth:
            raise BoundExceeded("max_depth", f"the value nests deeper than {bounds.max_depth} levels")

    def _text(self, value: Any, what: str, limit: int | None = None) -> Any:
        if self.bounds is not None and isinstance(value, str):
            limit = self.bounds.max_chars if limit is None else limit
            if len(value) > limit:
                raise BoundExceeded("max_chars", f"{what} of {len(value):,} characters (at most {limit:,})")
        return value

    def _list(self, data: Any, what: str) -> list[Any]:
        if not isinstance(data, list):
            raise ValueEncodingError(f"the items of a {what} must be a list, got {type(data).__name__}")
        if self.bounds is not None and len(data) > self.bounds.max_keys and what in ("dict", "set", "frozenset"):
            raise BoundExceeded("max_keys", f"a {what} of {len(data):,} keys (at most {self.bounds.max_keys:,})")
        return data

    def _spread(self, keys: list[Any], what: str) -> list[Any]:
        """`keys`, once no hash value is shared by more than `max_equal_hashes` of them."""
        if self.bounds is None:
            return keys
        limit = self.bounds.max_equal_hashes
        seen: dict[int, int] = {}  # hash values are ints below 2**61: distinct ones never collide here
        for key in keys:
            code = hash(key)  # TypeError for an unhashable key, as the dict itself would raise
            seen[code] = count = seen.get(code, 0) + 1
            if count > limit:
                raise BoundExceeded(
                    "max_equal_hashes",
                    f"more than {limit} keys of one {what} share a hash value (a hash-collision flood)",
                )
        return keys

    def value(self, data: Any, depth: int = 0) -> Any:
        self._count(depth)
        if isinstance(data, list):
            return [self.value(v, depth + 1) for v in data]
        if not isinstance(data, dict):
            return self._text(data, "a string")
        tag = data.get(TAG)
        if tag is None:
            return {self._text(k, "a key"): self.value(v, depth + 1) for k, v in data.items()}
        if tag == "dict":
            pairs = [(self.value(k, depth + 1), self.value(v, depth + 1)) for k, v in self._list(data["items"], tag)]
            self._spread([k for k, _ in pairs], "dict")
            return dict(pairs)
        if tag in ("tuple", "set", "frozenset"):
            items = [self.value(v, depth + 1) for v in self._list(data["items"], tag)]
            if tag == "tuple":
                return tuple(items)
            return set(self._spread(items, tag)) if tag == "set" else frozenset(self._spread(items, tag))
        if tag == "bytes":
            return __import__("base64").b64decode(self._text(data["b64"], "bytes"))
        import datetime
        import decimal

        builders: dict[str, Callable[[], Any]] = {
            "datetime": lambda: datetime.datetime.fromisoformat(self._text(data["iso"], "a datetime", MAX_ISO_CHARS)),
            "date": lambda: datetime.date.fromisoformat(self._text(data["iso"], "a date", MAX_ISO_CHARS)),
            "time": lambda: datetime.time.fromisoformat(self._text(data["iso"], "a time", MAX_ISO_CHARS)),
            "timedelta": lambda: datetime.timedelta(seconds=data["seconds"]),
            "Decimal": lambda: decimal.Decimal(self._text(data["text"], "a Decimal", MAX_DECIMAL_CHARS)),
            "complex": lambda: complex(*data["parts"]),
        }
        if tag not in builders:
            raise ValueEncodingError(f"unknown encoded type {str(tag)[:40]!r}")
        return builders[tag]()


def decode_value(data: Any, bounds: DecodeBounds | None = None) -> Any:
    """The value `encode_value` encoded; with `bounds`, refuses (`BoundExceeded`) a value past them."""
    return _Decoding(bounds).value(data)


# ------------------------------------------------------------------------------- output capture
class CellOutput:
    """What one cell printed, capped at `limit` characters (the total is still counted)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.kept = 0
        self.total = 0
        self.lock = threading.Lock()
        self._decoder: Any = None  # for bytes written to ``sys.stdout.buffer``: a character may span writes

    def write(self, text: str) -> None:
        with self.lock:
            self.total += len(text)
            room = self.limit - self.kept
            if room > 0:
                piece = text[:room]
                self.parts.append(piece)
                self.kept += len(piece)

    def write_bytes(self, data: bytes) -> None:
        """Bytes the cell wrote to ``sys.stdout.buffer``, decoded as UTF-8 (bad bytes replaced)."""
        with self.lock:
            if self._decoder is None:
                self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
            text = self._decoder.decode(data)
        self.write(text)

    def getvalue(self) -> str:
        return "".join(self.parts)


class RoutedStream(io.TextIOBase):
    """A stand-in for sys.stdout / sys.stderr that writes into the capture of the calling thread.

    Threads started by user code inherit no capture; their writes go to the one cell that is running,
    if exactly one is, and to the original stream otherwise. Bytes written to `buffer` follow the
    same rule (the original stream's own buffer, when it has one, for writes that go there).
    """

    def __init__(self, fallback: TextIO) -> None:
        super().__init__()
        self._fallback = fallback
        self._local = threading.local()
        self._active: set[CellOutput] = set()
        self._lock = threading.Lock()
        self._buffer = RoutedBuffer(self)

    @property
    def fallback(self) -> TextIO:
        """The stream this one stands in for (where writes outside every cell go)."""
        return self._fallback

    @property
    def buffer(self) -> RoutedBuffer:
        """The binary side, as a real stdout has: ``sys.stdout.buffer.write(b"...")`` works while routed."""
        return self._buffer

    def bind(self, capture: CellOutput | None) -> None:
        """Route the calling thread's writes into `capture` (None to stop)."""
        previous = getattr(self._local, "capture", None)
        with self._lock:
            if previous is not None:
                self._active.discard(previous)
            if capture is not None:
                self._active.add(capture)
        self._local.capture = capture

    def capture(self) -> CellOutput | None:
        """Where the calling thread's writes go: its own cell, else the only running one, else None."""
        capture = getattr(self._local, "capture", None)
        if capture is None:
            with self._lock:
                capture = next(iter(self._active)) if len(self._active) == 1 else None
        return capture

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        capture = self.capture()
        if capture is not None:
            capture.write(text)
        else:
            self._fallback.write(text)
        return len(text)

    def flush(self) -> None:
        pass

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


class RoutedBuffer(io.BufferedIOBase):
    """`RoutedStream.buffer`: bytes into the calling thread's capture, or into the original stream's buffer."""

    def __init__(self, stream: RoutedStream) -> None:
        super().__init__()
        self._stream = stream

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(memoryview(data))
        capture = self._stream.capture()
        if capture is not None:
            capture.write_bytes(chunk)
            return len(chunk)
        fallback = self._stream.fallback
        fallback.flush()  # text written before these bytes comes out before them
        fallback.buffer.write(chunk)  # AttributeError, as the original would raise, when it has no buffer
        return len(chunk)

    def flush(self) -> None:
        with contextlib.suppress(AttributeError, ValueError):
            self._stream.fallback.buffer.flush()


class StreamRouting:
    """sys.stdout and sys.stderr as `RoutedStream`s while REPLs run in this process, and back.

    The worker program routes once for good (the process is the worker's). The ``local`` sandbox shares
    the host's process: it holds the routing while it is open (`hold` / `release`), and when the last
    holder lets go the host's own streams are put back. `reset` puts them back whatever holds them.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._holders = 0

    def install(self) -> tuple[RoutedStream, RoutedStream]:
        """Make sys.stdout and sys.stderr routing streams, wrapping whatever streams are current.

        Called before every cell: if something replaced sys.stdout since (a test runner, a notebook), a new
        router wraps the new stream instead of writing past it.
        """
        with self._lock:
            if not isinstance(sys.stdout, RoutedStream):
                sys.stdout = RoutedStream(sys.stdout)
            if not isinstance(sys.stderr, RoutedStream):
                sys.stderr = RoutedStream(sys.stderr)
            return sys.stdout, sys.stderr

    def hold(self) -> None:
        """Route the streams until a matching `release`."""
        with self._lock:
            self._holders += 1
            self.install()

    def release(self) -> None:
        """Let go of one `hold`; the last one puts the host's streams back."""
        with self._lock:
            self._holders = max(0, self._holders - 1)
            if self._holders == 0:
                self._restore()

    @property
    def holders(self) -> int:
        """How many holds are in force."""
        with self._lock:
            return self._holders

    def reset(self) -> None:
        """Forget every hold and put the host's streams back (for tests and embedders)."""
        with self._lock:
            self._holders = 0
            self._restore()

    def _restore(self) -> None:
        # Only routers of ours that are still installed are undone; a stream someone set since is theirs.
        while isinstance(sys.stdout, RoutedStream):
            sys.stdout = sys.stdout.fallback
        while isinstance(sys.stderr, RoutedStream):
            sys.stderr = sys.stderr.fallback


ROUTING = StreamRouting()


# ------------------------------------------------------------------------------------ the REPL
class CallFailed(RuntimeError):
    """A sub-call or tool call failed on the host; the message says why."""


class BudgetExhaustedError(RuntimeError):
    """The run's budget is spent: no more sub-calls can be made in this run."""


class _FinalSignal(BaseException):
    """Ends the cell after FINAL / FINAL_VAR (a BaseException so `except Exception` cannot swallow it)."""


class AnswerDict(dict):  # type: ignore[type-arg]
    """The reference RLM's final-answer protocol: ``answer["content"] = ...; answer["ready"] = True``.

    A plain dict to model code; setting ``ready`` to a true value hands ``content`` to `on_ready`. The cell
    runs on to its end, as in the reference (FINAL, by contrast, ends the cell at once).
    """

    def __init__(self, on_ready: Callable[[Any], None], initial: dict[str, Any] | None = None) -> None:
        super().__init__({"content": "", "ready": False, **(initial or {})})
        self._on_ready = on_ready

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        if key == "ready" and value:
            self._on_ready(self.get("content", ""))

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value


def _json_or_none(value: Any) -> Any:
    """`value` when it is JSON of a sendable size, else None (whatever its methods raise)."""
    try:
        text = json.dumps(value)
        if len(text) > MAX_FINAL_VALUE_CHARS or count_values(text.encode(), MAX_FINAL_VALUES) > MAX_FINAL_VALUES:
            return None
    except Exception:  # user objects may raise anything, RecursionError and MemoryError included
        return None
    return value


def _safe_text(value: Any) -> str:
    """`str(value)`, or the best that can be had when its `__str__` / `__repr__` raise."""
    for convert in (str, repr):
        try:
            text = convert(value)
            if isinstance(text, str):
                return text
        except Exception:  # not BaseException: a time limit's signal must still stop the cell
            pass
    return f"<{_type_name(value)} object that cannot be shown>"


def _type_name(value: Any) -> str:
    try:
        return str(type(value).__name__)[:100]
    except Exception:
        return "object"


def _cut_final(text: str) -> str:
    if len(text) <= MAX_FINAL_CHARS:
        return text
    return f"{text[:MAX_FINAL_CHARS]}\n[final answer cut at {MAX_FINAL_CHARS:,} of {len(text):,} characters]"


def _cap(text: str, limit: int) -> str:
    """Head and tail of `text` within about `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3) :]
    return f"{head}\n... [{len(text) - len(head) - len(tail):,} characters cut] ...\n{tail}"


def describe_value(value: Any) -> str:
    """A short description of a REPL value: its type and size (never raises)."""
    kind = _type_name(value)
    try:
        if isinstance(value, str | bytes | list | tuple | dict | set):
            unit = "chars" if isinstance(value, str) else "bytes" if isinstance(value, bytes) else "items"
            return f"{kind}, {len(value):,} {unit}"
    except Exception:  # a subclass whose __len__ raises
        pass
    return kind


class Repl:
    """A persistent Python namespace with the RLM's functions in it.

    Args:
        context: The input value (already loaded).
        call: How a sub-call reaches the host: ``call(kind, args) -> value``; it raises `CallFailed`
            or `BudgetExhaustedError` on failure.
        tools: Names of host-side functions to expose, with their descriptions.
        capture_chars: How much of a cell's printed output is kept.
        workdir: Where `open()` with a relative path lands, for a REPL sharing its process (and working
            folder) with others: the ``local`` sandbox. No ``os.chdir``, so neighbouring runs cannot race.
    """

    def __init__(
        self,
        context: Any,
        call: CallFunction,
        tools: dict[str, str] | None = None,
        capture_chars: int = DEFAULT_CAPTURE_CHARS,
        workdir: str | None = None,
    ) -> None:
        self._call = call
        self._capture_chars = capture_chars
        self._cells = itertools.count(1)
        self._final: dict[str, Any] | None = None
        # Called with the final answer as soon as FINAL / FINAL_VAR is called, before the cell ends: the
        # worker program sends it to the host at once, so nothing that happens afterwards can lose it.
        self.on_final: Callable[[dict[str, Any]], None] | None = None
        self.namespace: dict[str, Any] = {"__name__": "__rlm__", "__builtins__": _builtins_for(workdir)}
        self.namespace.update(
            context=context,
            prompt=context,
            llm_query=self.llm_query,
            llm_query_batched=self.llm_query_batched,
            rlm_query=self.rlm_query,
            rlm_query_batched=self.rlm_query_batched,
            FINAL=self.final,
            FINAL_VAR=self.final_var,
            SHOW_VARS=self.show_vars,
            call_tool=self.call_tool,
        )
        for name, description in (tools or {}).items():
            self.namespace[name] = self._tool(name, description)
        # What is put back after every cell if model code rebinds it (`context = context.split()`).
        self._scaffold: dict[str, Any] = {k: v for k, v in self.namespace.items() if not k.startswith("__")}
        self._builtin_names = set(self.namespace)
        self.namespace["answer"] = AnswerDict(self._answer_ready)
        self.session = ReplSession(self)
        self.namespace[SESSION_TOOL] = self.session

    # -- functions visible to user code ---------------------------------------------------------
    # A failed call returns "Error: ..." (see CALL_ERROR_PREFIX); only a spent budget raises, since the
    # run is over then. Bad arguments (a str where a list belongs) still raise TypeError at once.
    def llm_query(self, prompt: Any, model: str | None = None) -> str:
        """Ask a sub-model one question; returns its reply text, or ``"Error: ..."`` if the call failed."""
        try:
            return str(self._call("llm_query", {"prompt": _as_prompt(prompt), "model": model}))
        except CallFailed as exc:
            return f"{CALL_ERROR_PREFIX}{exc}"

    def llm_query_batched(self, prompts: Any, model: str | None = None) -> list[str]:
        """Ask many prompts concurrently; returns replies in order (``"Error: ..."`` in a failed slot)."""
        items = _as_prompt_list(prompts, "llm_query_batched")
        if not items:
            return []
        try:
            return [str(r) for r in self._call("llm_query_batched", {"prompts": items, "model": model})]
        except CallFailed as exc:
            return [f"{CALL_ERROR_PREFIX}{exc}"] * len(items)

    def rlm_query(self, prompt: Any, context: Any = None, model: str | None = None) -> str:
        """Run a nested RLM (depth + 1) on `prompt` over `context` (default: the prompt alone)."""
        try:
            return str(self._call("rlm_query", {"prompt": _as_prompt(prompt), "context": context, "model": model}))
        except CallFailed as exc:
            return f"{CALL_ERROR_PREFIX}{exc}"

    def rlm_query_batched(self, prompts: Any, contexts: Any = None, model: str | None = None) -> list[str]:
        """Run several nested RLMs concurrently; returns answers in input order (``"Error: ..."`` if failed)."""
        items = _as_prompt_list(prompts, "rlm_query_batched")
        if contexts is not None:
            if not isinstance(contexts, list | tuple) or len(contexts) != len(items):
                raise TypeError(
                    "rlm_query_batched(prompts, contexts): contexts must be a list as long as prompts "
                    f"({len(items)}), got {type(contexts).__name__}"
                )
            contexts = list(contexts)
        if not items:
            return []
        try:
            return [
                str(r)
                for r in self._call("rlm_query_batched", {"prompts": items, "contexts": contexts, "model": model})
            ]
        except CallFailed as exc:
            return [f"{CALL_ERROR_PREFIX}{exc}"] * len(items)

    def call_tool(self, name: Any, arguments: Any = None, /, **kwargs: Any) -> None:
        """Call one of the caller's tools: ``call_tool("search", query="...")`` (or a dict of arguments).

        Returns None: the caller runs the tool after this turn, which ends once the cell is over. The host
        checks the call against the tool's schema; a bad call is reported after the cell.
        """
        if not isinstance(name, str):
            raise TypeError(f"call_tool(name, ...): the tool's name must be a string, got {_type_name(name)}")
        if arguments is not None and not isinstance(arguments, dict):
            raise TypeError(
                f"call_tool({name[:80]!r}, arguments): arguments must be a dict (or give keyword arguments), "
                f"got {_type_name(arguments)}"
            )
        merged = {**(arguments or {}), **kwargs}
        try:
            text = json.dumps(merged, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise TypeError(
                f"call_tool({name[:80]!r}): the arguments must be JSON data (str, int, float, bool, None, lists "
                f"and dicts with string keys): {_safe_text(exc)[:200]}"
            ) from None
        if len(text) > MAX_TOOL_ARGS_CHARS:
            raise ValueError(
                f"call_tool({name[:80]!r}): the arguments are {len(text):,} characters of JSON, over the "
                f"{MAX_TOOL_ARGS_CHARS:,} allowed; pass a short reference instead of the data"
            )
        self._call("call_tool", {"name": name[:1000], "args": json.loads(text)})

    def final(self, answer: Any) -> None:
        """End the run with `answer` as the final answer."""
        self._give_final(answer, answer if isinstance(answer, str) else _safe_text(answer))

    def _answer_ready(self, content: Any) -> None:
        """`answer["ready"] = True`: record the final answer; the cell runs on to its end."""
        self._record_final(content, content if isinstance(content, str) else _safe_text(content))

    def final_var(self, name_or_value: Any) -> None:
        """End the run with a variable's value (by name) or with the value itself."""
        value = name_or_value
        if isinstance(name_or_value, str):
            name = name_or_value.strip().strip("'\"")
            # Data (`context`, `context_1`, `history`, ...) may be returned; the REPL's functions may not.
            is_function = name in self._scaffold and callable(self._scaffold[name])
            if name in self.namespace and not is_function:
                value = self.namespace[name]
            elif name.isidentifier():
                raise NameError(
                    f"FINAL_VAR({name!r}): no variable named {name!r} exists in the REPL; assign it "
                    "first, or pass the value itself, or use FINAL(text)"
                )
        if isinstance(value, str):
            text = value
        else:
            try:
                text = json.dumps(value, ensure_ascii=False, indent=2)
            except Exception:
                text = _safe_text(value)
        self._give_final(value, text)

    def _give_final(self, value: Any, text: str) -> None:
        """Record the answer as text first (nothing after this may lose it), then end the cell."""
        self._record_final(value, text)
        raise _FinalSignal

    def _record_final(self, value: Any, text: str) -> None:
        """Keep the answer (cut to fit one frame) and announce it to the host at once."""
        if isinstance(value, str) and len(value) > MAX_FINAL_VALUE_CHARS:
            # The host takes the text as the value: a long answer is not sent twice.
            self._final = {"text": _cut_final(text), "value": None, "value_is_text": True}
        else:
            self._final = {"text": _cut_final(text), "value": _json_or_none(value)}
        if self.on_final is not None:
            # Plain try (no context manager: fewer frames under a tiny recursion limit set by the cell);
            # when the frame cannot be sent now, the cell's result frame still carries the answer.
            try:  # noqa: SIM105
                self.on_final(self._final)
            except BaseException:
                pass

    @property
    def last_final(self) -> dict[str, Any] | None:
        """The final answer given in the current (or last) cell, if any."""
        return self._final

    def show_vars(self) -> dict[str, str]:
        """Print and return the user's variables with their types and sizes."""
        listing = self.variables()
        for name, description in listing.items():
            print(f"{name}: {description}")
        if not listing:
            print("(no variables yet)")
        return listing

    def _tool(self, name: str, description: str) -> Callable[..., Any]:
        def tool(*args: Any, **kwargs: Any) -> Any:
            where = f"an argument of {name}()"
            payload = {"name": name, "args": encode_value(list(args), where), "kwargs": encode_value(kwargs, where)}
            return decode_value(self._call("tool", payload))

        tool.__name__ = name
        tool.__doc__ = description
        return tool

    # -- running cells --------------------------------------------------------------------------
    def variables(self) -> dict[str, str]:
        """The user's variables (not modules, not the REPL's own functions) with short descriptions."""
        out: dict[str, str] = {}
        for name, value in list(self.namespace.items()):
            if (
                not isinstance(name, str)
                or name.startswith("_")
                or name in self._builtin_names
                or isinstance(value, AnswerDict)
            ):
                continue
            if type(value).__name__ == "module":
                continue
            if len(out) >= MAX_VARIABLES:
                out["..."] = f"{len(self.namespace) - len(out):,} more names not listed"
                break
            out[name[:200]] = describe_value(value)
        return out

    def execute(self, code: str) -> dict[str, Any]:
        """Run one cell; returns the ``result`` message body (without the type)."""
        number = next(self._cells)
        capture = CellOutput(self._capture_chars)
        self._final = None
        error: str | None = None
        started = time.perf_counter()
        stdout, stderr = ROUTING.install()
        stdout.bind(capture)
        stderr.bind(capture)
        recursion_limit = sys.getrecursionlimit()
        try:
            error = self._run(code, f"<cell {number}>")
        finally:
            stdout.bind(None)
            stderr.bind(None)
            # A cell may set a tiny limit; the worker's own work (encoding the result) needs the usual one.
            sys.setrecursionlimit(max(recursion_limit, 1000))
            self.restore_scaffold()
        try:
            variables = self.variables()
        except BaseException as exc:  # a namespace mutated by a thread while listed, ...
            variables = {}
            error = error or f"the REPL's variables could not be listed: {_type_name(exc)}"
        return {
            "output": capture.getvalue(),
            "output_chars": capture.total,
            "error": None if error is None else _cap(error, self._capture_chars),
            "final": self._final,
            "variables": variables,
            "duration": time.perf_counter() - started,
        }

    def restore_scaffold(self) -> None:
        """Put back the REPL's own names if model code rebound them; user variables stay.

        An `answer` rebound to a plain dict with ``ready`` set still counts as the final answer.
        """
        for name, value in self._scaffold.items():
            if self.namespace.get(name) is not value:
                self.namespace[name] = value
        # A dict rebound to `answer` is the reference's protocol (re-wrapped, `ready` honoured); any other
        # value is a user variable (`answer = "..."; FINAL_VAR("answer")` is common) and stays.
        current = self.namespace.get("answer")
        if isinstance(current, dict) and not isinstance(current, AnswerDict):
            if current.get("ready") and self._final is None:
                self._answer_ready(current.get("content", ""))
            self.namespace["answer"] = AnswerDict(self._answer_ready, dict(current))
        elif "answer" not in self.namespace:
            self.namespace["answer"] = AnswerDict(self._answer_ready)

    def add_values(self, encoded: dict[str, Any]) -> None:
        """Put plain values given as tools (encoded with `encode_value`) into the namespace."""
        for name, data in encoded.items():
            self.namespace[name] = decode_value(data)

    def set_scaffold(self, name: str, value: Any) -> None:
        """Make `name` a REPL name that is restored after every cell (context aliases, histories)."""
        self._scaffold[name] = value
        self.namespace[name] = value
        self._builtin_names.add(name)

    def _run(self, code: str, filename: str) -> str | None:
        try:
            tree = ast.parse(code, filename=filename, mode="exec")
        except SyntaxError as exc:
            return "".join(traceback.format_exception_only(SyntaxError, exc)).strip()
        except Exception as exc:  # e.g. a lone surrogate in the source (UnicodeEncodeError), nesting too deep
            return f"the cell's code could not be parsed: {_type_name(exc)}: {_safe_text(exc)[:500]}"
        # Echo the value of a trailing expression, as notebooks do: models often end with `len(x)`.
        echo = None
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
            echo = ast.Expression(last.value)
        try:
            exec(compile(tree, filename, "exec"), self.namespace)
            if echo is not None:
                value = eval(compile(echo, filename, "eval"), self.namespace)
                if value is not None:
                    print(repr(value))
        except _FinalSignal:
            return None
        except BaseException as exc:
            try:
                return _short_traceback(exc, filename, code)
            except BaseException:  # str(exc) raised, or ran out of memory / recursion depth
                return f"{_type_name(exc)} (its message could not be shown)"
        return None


class ReplSession:
    """What a persistent session adds to a REPL between runs, pulled from the host over the call channel.

    Each later run's context becomes ``context_1``, ``context_2``, ... and each finished conversation
    ``history_0``, ... ; ``context`` / ``history`` name the latest one (or the first, as the reference
    RLM does, when the host says ``alias="first"``). The values travel as JSON in a call reply, so this
    works the same in every sandbox kind.
    """

    def __init__(self, repl: Repl) -> None:
        self._repl = repl
        self.contexts = 1
        self.histories = 0

    def pull(self) -> dict[str, int]:
        """Fetch the host's pending contexts and histories into the namespace; returns the counts."""
        payload = self._repl._call("tool", {"name": SESSION_TOOL, "args": [], "kwargs": {}})
        first = payload.get("alias") == "first"
        repl = self._repl
        if self.contexts == 1 and "context_0" not in repl.namespace:
            repl.set_scaffold("context_0", repl.namespace.get("context"))
        for value in payload.get("contexts") or []:
            repl.set_scaffold(f"context_{self.contexts}", value)
            self.contexts += 1
        for value in payload.get("histories") or []:
            repl.set_scaffold(f"history_{self.histories}", value)
            self.histories += 1
        latest = 0 if first else self.contexts - 1
        repl.set_scaffold("context", repl.namespace[f"context_{latest}"])
        repl.set_scaffold("prompt", repl.namespace["context"])
        if self.histories:
            repl.set_scaffold("history", repl.namespace[f"history_{0 if first else self.histories - 1}"])
        repl.namespace["answer"] = AnswerDict(repl._answer_ready)
        return {"contexts": self.contexts, "histories": self.histories}


def _builtins_for(workdir: str | None) -> Any:
    """The builtins of a namespace: the real ones, with `open` resolving relative paths in `workdir`."""
    import builtins

    if workdir is None:
        return builtins
    real_open = builtins.open

    def open_in_workdir(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, str | bytes | os.PathLike) and not os.path.isabs(os.fsdecode(file)):
            file = os.path.join(workdir, os.fsdecode(file))
        return real_open(file, *args, **kwargs)

    open_in_workdir.__doc__ = real_open.__doc__
    return {**vars(builtins), "open": open_in_workdir}


def _as_prompt(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else str(prompt)


def _as_prompt_list(prompts: Any, function: str) -> list[str]:
    if isinstance(prompts, str | bytes) or not hasattr(prompts, "__iter__"):
        raise TypeError(
            f"{function} expects a list of prompts, got {type(prompts).__name__}; "
            f"wrap a single prompt in a list or use {function.removesuffix('_batched')}"
        )
    return [_as_prompt(p) for p in prompts]


def _short_traceback(exc: BaseException, filename: str, code: str) -> str:
    """The exception with only the frames of user code, so tracebacks stay short and relevant."""
    source = code.splitlines()
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    lines = []
    for frame in frames[-5:]:
        text = source[frame.lineno - 1].strip() if frame.lineno and frame.lineno <= len(source) else ""
        lines.append(f"  line {frame.lineno}, in {frame.name}: {text}")
    head = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return "\n".join(["Traceback (most recent call last):", *lines, head]) if lines else head


# --------------------------------------------------------------------------- the worker program
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
                elif kind in ("exec", "shutdown"):
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


def load_context(spec: dict[str, Any] | None) -> Any:
    """Load the context file the host wrote (text or JSON)."""
    if not spec:
        return None
    path = spec["path"]
    if spec.get("format") == "json":
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def apply_limits(limits: dict[str, Any]) -> list[str]:
    """Apply resource limits the host asked for (POSIX only); returns the ones that took effect."""
    applied: list[str] = []
    try:
        import resource
    except ImportError:
        return applied
    table = {
        "memory_bytes": "RLIMIT_AS",
        "file_size_bytes": "RLIMIT_FSIZE",
        "processes": "RLIMIT_NPROC",
        "open_files": "RLIMIT_NOFILE",
    }
    for key, name in table.items():
        value = limits.get(key)
        if value is None or not hasattr(resource, name):
            continue
        try:
            resource.setrlimit(getattr(resource, name), (int(value), int(value)))
            applied.append(key)
        except (ValueError, OSError):
            pass
    return applied


class CpuTimeLimitExceeded(BaseException):
    """Raised in the cell's thread on SIGXCPU (a BaseException so `except Exception` cannot swallow it)."""


class CpuBudget:
    """A per-cell CPU-time limit: RLIMIT_CPU's soft limit set relative to the usage before each cell.

    The kernel sends SIGXCPU once the soft limit is passed (and every second after); the handler raises
    in the main thread, which runs the cell, so the cell ends and the namespace survives.
    """

    def __init__(self, seconds: float) -> None:
        import resource
        import signal

        self._resource = resource
        self.seconds = seconds
        signal.signal(signal.SIGXCPU, self._expired)

    def _expired(self, signum: int, frame: Any) -> None:
        raise CpuTimeLimitExceeded(
            f"the cell used more than its CPU time limit of {self.seconds:g} s and was stopped "
            "(limit: cpu_time_limit); your variables survived"
        )

    def _set_soft(self, soft: int) -> None:
        _, hard = self._resource.getrlimit(self._resource.RLIMIT_CPU)
        if hard != self._resource.RLIM_INFINITY:
            soft = min(soft, hard)
        self._resource.setrlimit(self._resource.RLIMIT_CPU, (soft, hard))

    def arm(self) -> None:
        usage = self._resource.getrusage(self._resource.RUSAGE_SELF)
        self._set_soft(int(usage.ru_utime + usage.ru_stime + self.seconds) + 1)

    def disarm(self) -> None:
        self._set_soft(self._resource.RLIM_INFINITY)


def add_site_packages() -> None:
    """Put site-packages on the path without running `site`'s ``.pth`` hooks.

    The host starts the worker with ``-S``: processing ``.pth`` files (editable installs, certificate
    shims) costs about 55 ms of CPU per start, while model code still expects to import numpy & co.
    """
    import site

    for path in site.getsitepackages():
        if path not in sys.path:
            sys.path.append(path)


def raise_walls(argv: list[str]) -> dict[str, Any]:
    """Raise the walls the host asked for (``--walls SPEC``: Landlock, seccomp, no capabilities).

    Runs first, while the worker is single-threaded (Landlock and seccomp bind the calling thread and
    what it starts). The walls module sits next to this file and is loaded from the path in the spec:
    ``python -I`` puts no folder of ours on ``sys.path``. Its cached bytecode is used when the host
    made it visible (a cold start saves compiling it). Raises if a wall cannot be raised.
    """
    if len(argv) < 3 or argv[1] != "--walls":
        return {}
    from importlib.machinery import SourceFileLoader

    spec = json.loads(argv[2])
    namespace: dict[str, Any] = {"__name__": "rlm_walls"}
    code = SourceFileLoader("rlm_walls", spec["module"]).get_code("rlm_walls")
    if code is None:
        raise ImportError(f"no code in the walls module {spec['module']!r}")
    exec(code, namespace)
    applied: dict[str, Any] = namespace["apply"](spec)
    return applied


def main() -> int:
    """Serve the protocol on stdin / the original stdout until shutdown or end of input."""
    try:
        raise_walls(sys.argv)
    except Exception as exc:  # fail closed: no model code runs without the walls the host asked for
        print(f"rlm worker: cannot raise the sandbox walls: {exc}", file=sys.stderr)
        return 3
    if sys.flags.no_site:
        add_site_packages()
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a C extension writing to fd 1 must not corrupt the frames
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    # The frames keep the original stdin buffer (a bootstrap may have read ahead into it); `sys.stdin` is
    # /dev/null. Model code reading stdin cannot take a frame, and a child it forks cannot deadlock: each
    # `multiprocessing` child closes `sys.stdin`, and closing the protocol's buffer would wait forever for
    # the lock the reader thread held at the fork.
    protocol_in = sys.stdin.buffer
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    channel = WorkerChannel(protocol_in, protocol_out)
    init = read_frame(protocol_in)
    if init is None or init.get("type") != "init":
        print("rlm worker: expected an init frame", file=sys.stderr)
        return 2
    limits = init.get("limits") or {}
    applied = apply_limits(limits)
    cpu: CpuBudget | None = None
    if limits.get("cpu_seconds") and sys.platform != "win32":
        cpu = CpuBudget(float(limits["cpu_seconds"]))
        applied.append("cpu_seconds")
    try:
        context = load_context(init.get("context"))
    except (OSError, ValueError) as exc:
        channel.send({"type": "ready", "ok": False, "error": f"cannot load the context file: {exc}"})
        return 1
    repl = Repl(
        context,
        channel.call,
        init.get("tools") or {},
        int(init.get("capture_chars") or DEFAULT_CAPTURE_CHARS),
    )
    repl.add_values(init.get("values") or {})
    reader = threading.Thread(target=channel.read_loop, name="rlm-frames", daemon=True)
    reader.start()
    channel.send({"type": "ready", "ok": True, "pid": os.getpid(), "limits": applied, "python": sys.version.split()[0]})
    while True:
        command = channel.next_command()
        if command["type"] == "shutdown":
            break
        cell_id = command.get("id")
        repl.on_final = functools.partial(send_final, channel, cell_id)
        if cpu is not None:
            cpu.arm()
        try:
            result = run_command(repl, command)
        finally:
            repl.on_final = None  # a thread of this cell calling FINAL later must not announce it for this id
            if cpu is not None:
                cpu.disarm()
        send_result(channel, cell_id, result)
    return 0


def send_final(channel: WorkerChannel, cell_id: Any, final: dict[str, Any]) -> None:
    """Tell the host the final answer the moment it is given (the cell's result repeats it)."""
    channel.send({"type": "final", "id": cell_id, "final": final})


def run_command(repl: Repl, command: dict[str, Any]) -> dict[str, Any]:
    """Run an ``exec`` command; whatever goes wrong, a result that keeps a final answer already given."""
    started = time.perf_counter()
    try:
        return repl.execute(str(command.get("code", "")))
    except BaseException as exc:  # e.g. the CPU limit's signal arriving after the cell's own code ended
        return {
            "output": "",
            "output_chars": 0,
            "error": f"the cell ended with {_type_name(exc)} outside its code",
            "final": repl.last_final,
            "variables": {},
            "duration": time.perf_counter() - started,
        }


def send_result(channel: WorkerChannel, cell_id: Any, result: dict[str, Any]) -> None:
    """Send a cell's result; if it cannot be encoded, a short one that still carries the final answer."""
    try:
        channel.send({"type": "result", "id": cell_id, **result})
        return
    except BaseException as exc:
        error = f"the cell's result could not be sent to the host ({_type_name(exc)}: {_safe_text(exc)[:200]})"
    channel.send(
        {
            "type": "result",
            "id": cell_id,
            "output": "",
            "output_chars": 0,
            "error": error,
            "final": result.get("final"),
            "variables": {},
            "duration": 0.0,
        }
    )


if __name__ == "__main__":
    sys.exit(main())
