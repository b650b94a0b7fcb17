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


class LineDecoder:
    """Turns text or bytes chunks of base64 lines (split anywhere) into bytes for an asyncio reader.

    A line that is not base64 ends the stream with a `ProtocolError`, which the host channel reports
    as a malformed frame.
    """

    def __init__(self) -> None:
        self.reader = asyncio.StreamReader(limit=2**31)
        self._pending = ""

    def feed(self, text: str | bytes) -> None:
        if self.reader.at_eof() or self.reader.exception() is not None:
            return
        self._pending += text if isinstance(text, str) else text.decode("ascii", "replace")
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if not line.strip():
                continue
            try:
                self.reader.feed_data(base64.b64decode(line, validate=True))
            except (binascii.Error, ValueError):
                self.reader.set_exception(ProtocolError(f"a stdout line is not base64: {line[:40]!r}"))
                return

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
        self.stderr.append(data if isinstance(data, str) else data.decode("utf-8", "replace"))

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
