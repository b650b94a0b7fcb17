"""What each cell prints, captured per thread: a cell's output never lands in another's.

`RoutedStream` stands in for ``sys.stdout`` / ``sys.stderr`` and writes into the capture bound to the
calling thread (`CellOutput`); `ROUTING` installs the routers, for good in the worker program and for as
long as it is open in the ``local`` sandbox, which shares the host's process.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import sys
import threading

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TextIO


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
