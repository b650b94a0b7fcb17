"""How bytes reach a worker in a cloud sandbox through the provider's process API, and come back.

A provider starts one command with stdin open (`RemoteProcess` wraps its handle) and hands back what it
prints. Where the API carries text rather than bytes, the frames travel as base64 lines (the ``base64``
and ``base64-out`` transports), re-encoded inside the sandbox by the bootstrap program and decoded here
(`LineDecoder`). Shell-string APIs get `command_line`, so the worker sees none of the sandbox's environment.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import shlex
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from typing import Any

from rlm_adapters.core.sandbox.programs.worker import ProtocolError
from rlm_adapters.core.sandbox.shipping import CHUNK, Transport

__all__ = ["LineDecoder", "RemoteProcess", "Transport", "command_line"]


# The bootstrap's lines carry 64 KiB each (87,384 base64 characters); anything far longer was not cut there.
MAX_LINE_CHARS = 1 << 20
# What is kept of each piece of stderr (the tail of 64 of them is shown when a worker fails to start).
STDERR_PIECE_CHARS = 8192


class LineDecoder:
    """Turns text or bytes chunks of base64 lines (split anywhere) into bytes for an asyncio reader.

    Linear in what it is fed (each chunk is searched once for its line ends) and bounded: a line that is
    not base64, or one longer than `MAX_LINE_CHARS`, ends the stream with a `ProtocolError`, which the
    host channel reports as a malformed frame (and the worker is restarted).
    """

    def __init__(self) -> None:
        self.reader = asyncio.StreamReader(limit=2**31)
        self._pieces: list[str] = []  # the line being received, in the pieces it came in
        self._pending = 0

    def feed(self, text: str | bytes) -> None:
        if self.reader.at_eof() or self.reader.exception() is not None:
            return
        chunk = text if isinstance(text, str) else text.decode("ascii", "replace")
        start = 0
        while (end := chunk.find("\n", start)) >= 0:
            if self._pieces:
                line = "".join([*self._pieces, chunk[start:end]])
                self._pieces, self._pending = [], 0
            else:
                line = chunk[start:end]
            start = end + 1
            if not self._line(line):
                return
        if start < len(chunk):
            self._pieces.append(chunk[start:])
            self._pending += len(chunk) - start
            if self._pending > MAX_LINE_CHARS:
                self._fail(f"a stdout line runs past {MAX_LINE_CHARS:,} characters without an end")

    def _line(self, line: str) -> bool:
        if len(line) > MAX_LINE_CHARS:
            self._fail(f"a stdout line of {len(line):,} characters (at most {MAX_LINE_CHARS:,})")
            return False
        if not line.strip():
            return True
        try:
            self.reader.feed_data(base64.b64decode(line, validate=True))
        except (binascii.Error, ValueError):
            self._fail(f"a stdout line is not base64: {line[:40]!r}")
            return False
        return True

    def _fail(self, reason: str) -> None:
        self._pieces, self._pending = [], 0
        self.reader.set_exception(ProtocolError(reason))

    def close(self) -> None:
        if not self.reader.at_eof() and self.reader.exception() is None:
            self.reader.feed_eof()


class RemoteProcess(ABC):
    """One command started in the remote sandbox, wrapped around the provider's handle for it.

    Providers feed what the command prints to `feed_stdout` / `feed_stderr` and call `end_of_output`
    when the stream ends; the base class turns base64 lines back into bytes when the transport needs it.
    """

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._decoder = LineDecoder() if transport != "raw" else None  # output as base64 lines
        self._raw = asyncio.StreamReader(limit=2**31) if transport == "raw" else None
        self.stderr: collections.deque[str] = collections.deque(maxlen=64)
        self._tasks: list[asyncio.Task[None]] = []
        self._ended = False

    def follow(self, stream: Any, *, stdout: bool) -> None:
        """Pump an SDK's async iterator of output chunks into `feed_stdout` / `feed_stderr` in a task."""

        async def pump() -> None:
            feed = self.feed_stdout if stdout else self.feed_stderr
            try:
                async for chunk in stream:
                    feed(chunk)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.feed_stderr(f"[the output stream broke: {type(exc).__name__}: {exc}]")
            finally:
                if stdout:
                    self.end_of_output()

        self.own(pump())

    def own(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run `coroutine` for as long as this process is held; `release` cancels it."""
        self._tasks.append(asyncio.create_task(coroutine, name=f"rlm-{self.transport}-output"))

    @property
    def reader(self) -> asyncio.StreamReader:
        """The worker's protocol output, as bytes."""
        if self._decoder is not None:
            return self._decoder.reader
        assert self._raw is not None
        return self._raw

    def feed_stdout(self, data: bytes | str) -> None:
        if self._ended:
            return
        if self._decoder is not None:
            self._decoder.feed(data)
        elif self._raw is not None:
            self._raw.feed_data(data.encode() if isinstance(data, str) else data)

    def feed_stderr(self, data: bytes | str) -> None:
        text = data if isinstance(data, str) else data[-STDERR_PIECE_CHARS * 4 :].decode("utf-8", "replace")
        self.stderr.append(text[-STDERR_PIECE_CHARS:])

    def end_of_output(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._decoder is not None:
            self._decoder.close()
        elif self._raw is not None:
            self._raw.feed_eof()

    async def write(self, data: bytes) -> None:
        """Send bytes to the command's stdin (base64 lines for the ``base64`` transport), in pieces."""
        for start in range(0, len(data), CHUNK):
            piece = data[start : start + CHUNK]
            await self.send(base64.b64encode(piece) + b"\n" if self.transport == "base64" else piece)

    @abstractmethod
    async def send(self, data: bytes) -> None:
        """Write already-encoded bytes to the command's stdin through the SDK."""

    @abstractmethod
    async def kill(self) -> None:
        """Stop the command and what it started (the sandbox lives on: a restart follows)."""

    async def release(self) -> None:
        """Let go of the output pumps and the SDK's handle (local only; after `kill` or the sandbox's deletion)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @abstractmethod
    async def exit_code(self) -> int | None:
        """The command's exit code, or None if it has not ended (or the provider cannot tell)."""


def command_line(argv: list[str], env: dict[str, str], *, replace_shell: bool = True) -> str:
    """`argv` as one shell command with exactly `env` as its environment, for process APIs that take a string
    and run it through the sandbox's shell (whose own environment the worker must not inherit).

    `replace_shell` execs it in place of that shell; not where the provider wraps the command in a script
    that must go on afterwards (Daytona records the exit code after it).
    """
    line = shlex.join(["env", "-i", *(f"{name}={value}" for name, value in env.items()), *argv])
    return f"exec {line}" if replace_shell else line
