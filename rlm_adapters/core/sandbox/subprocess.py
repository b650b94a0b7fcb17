"""The ``subprocess`` sandbox (the default): the worker program in a separate Python process.

The child gets no environment variable of the host (no API keys), runs in a scratch folder, has a
memory limit, and is killed and restarted when a cell runs past its time limit; the model is told its
variables were lost. Sub-calls travel back to the host over the framed protocol on the child's
stdin / stdout, so keys and the budget stay on the host.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rlm_adapters.core.sandbox import worker as worker_module
from rlm_adapters.core.sandbox.base import CellResult, SandboxSetup
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone
from rlm_adapters.errors import SandboxError

DEFAULT_MEMORY_BYTES = 2 * 1024**3
DEFAULT_CELL_TIMEOUT = 120.0
START_TIMEOUT = 30.0
STDERR_KEEP = 8192
WORKER_PATH = Path(worker_module.__file__).resolve()


def parse_size(value: int | str | None) -> int | None:
    """Bytes from an int or a string such as ``"512MiB"`` / ``"2GiB"`` / ``"1G"``."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip().lower().removesuffix("b").removesuffix("i")
    units = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise ValueError(f"cannot read the size {value!r}; use bytes or a string like '2GiB'") from None


def describe_exit(returncode: int | None) -> str:
    """Words for how a process ended."""
    if returncode is None:
        return "is not responding"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        hint = " (likely the memory limit or a kill from inside the cell)" if name == "SIGKILL" else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {returncode}"


class SubprocessSandbox:
    """The worker in a child process, with a memory limit and a hard per-cell timeout.

    Args:
        cell_timeout: Seconds a cell may run before the worker is killed and restarted.
        memory_limit: Address-space limit of the worker (bytes or ``"2GiB"``); None for none.
        capture_chars: How much a cell's printed output the worker keeps.
        python: The interpreter that runs the worker (default: this one).
    """

    kind = "subprocess"

    def __init__(
        self,
        *,
        cell_timeout: float | None = DEFAULT_CELL_TIMEOUT,
        memory_limit: int | str | None = DEFAULT_MEMORY_BYTES,
        capture_chars: int = worker_module.DEFAULT_CAPTURE_CHARS,
        python: str | None = None,
        file_size_limit: int | str | None = None,
    ) -> None:
        self.cell_timeout = cell_timeout
        self.memory_limit = parse_size(memory_limit)
        self.file_size_limit = parse_size(file_size_limit)
        self.capture_chars = capture_chars
        self.python = python or sys.executable
        self._setup: SandboxSetup | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._channel: HostChannel | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=64)
        self._stderr_task: asyncio.Task[None] | None = None
        self.worker_pid: int | None = None
        self.starts = 0

    @property
    def isolation(self) -> str:
        """Process isolation: separate process, no host environment, memory limit."""
        return "process (separate process, empty environment, resource limits)"

    @property
    def needs_context_file(self) -> bool:
        """The worker loads the context from a file."""
        return True

    def _environment(self, scratch: Path) -> dict[str, str]:
        # Nothing of the host's environment: API keys must never reach model code.
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        }

    def _command(self) -> list[str]:
        return [self.python, "-I", str(WORKER_PATH)]

    def _init_message(self) -> dict[str, Any]:
        assert self._setup is not None
        setup = self._setup
        limits = {"memory_bytes": self.memory_limit, "file_size_bytes": self.file_size_limit}
        return {
            "context": {"path": str(setup.context_file), "format": setup.context_format}
            if setup.context_file
            else None,
            "tools": setup.tools,
            "values": setup.values,
            "limits": {k: v for k, v in limits.items() if v is not None},
            "capture_chars": self.capture_chars,
        }

    async def start(self, setup: SandboxSetup) -> None:
        """Start the worker and load the context."""
        if setup.context_file is None:
            raise SandboxError("the subprocess sandbox needs the context written to a file")
        self._setup = setup
        await self._spawn()

    async def _spawn(self) -> None:
        assert self._setup is not None
        scratch = self._setup.scratch or self._setup.context_file.parent  # type: ignore[union-attr]
        try:
            self._process = await asyncio.create_subprocess_exec(
                *self._command(),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=scratch,
                env=self._environment(scratch),
                start_new_session=True,  # its own process group, so a kill takes its children too
            )
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox worker with {self.python!r}: {exc}") from exc
        self.starts += 1
        self.worker_pid = self._process.pid
        assert self._process.stdout is not None and self._process.stderr is not None
        self._stderr_task = asyncio.create_task(self._drain_stderr(self._process.stderr))
        self._channel = HostChannel(self._process.stdout, self._write, self._setup.handler)
        try:
            await self._channel.start(self._init_message(), START_TIMEOUT)
        except (WorkerGone, TimeoutError) as exc:
            detail = self._stderr_tail()
            await self._kill()
            raise SandboxError(f"the sandbox worker did not start: {exc}. {detail}".strip()) from exc

    async def _write(self, data: bytes) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(data)
        await self._process.stdin.drain()

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        # Always drained: a full stderr pipe would block the worker.
        with contextlib.suppress(Exception):
            while line := await stream.readline():
                self._stderr.append(line.decode("utf-8", "replace"))

    def _stderr_tail(self) -> str:
        text = "".join(self._stderr)[-STDERR_KEEP:].strip()
        return f"Worker stderr: {text[-500:]}" if text else ""

    async def execute(self, code: str, timeout: float | None) -> CellResult:
        """Run a cell; past `timeout` (or the sandbox's cell timeout) the worker is killed and restarted."""
        if self._channel is None:
            raise SandboxError("the sandbox is not started (or was closed)")
        limit = min((t for t in (timeout, self.cell_timeout) if t is not None), default=None)
        started = time.perf_counter()
        try:
            message = await asyncio.wait_for(self._channel.execute(code), limit)
        except TimeoutError:
            await self._restart()
            return CellResult(
                output="",
                error=f"the cell ran past its time limit of {limit:g} s and was stopped; the REPL was "
                "restarted and your variables were lost (`context` is still loaded)",
                duration=time.perf_counter() - started,
                timed_out=True,
                variables_lost=True,
            )
        except WorkerGone:
            returncode = await self._wait_exit()
            how = describe_exit(returncode)
            await self._restart()
            return CellResult(
                output="",
                error=f"the sandbox worker {how} during this cell; the REPL was restarted and your "
                "variables were lost (`context` is still loaded)",
                duration=time.perf_counter() - started,
                variables_lost=True,
            )
        result = CellResult.from_message(message)
        if result.error and result.error.startswith("MemoryError") and self.memory_limit:
            result.error += (
                f"\n(the sandbox's memory limit is {self.memory_limit / 1024**3:.1f} GiB; your variables survived)"
            )
        return result

    async def _wait_exit(self) -> int | None:
        if self._process is None:
            return None
        try:
            return await asyncio.wait_for(self._process.wait(), 1.0)
        except TimeoutError:
            return None

    async def _restart(self) -> None:
        await self._kill()
        await self._spawn()

    async def _kill(self) -> None:
        process, channel = self._process, self._channel
        self._process = self._channel = None
        if channel is not None:
            await channel.aclose()
        if process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            if process.stdin is not None:
                process.stdin.close()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task
            self._stderr_task = None

    async def aclose(self) -> None:
        """Stop the worker and everything it started."""
        await self._kill()
