"""What the cloud sandboxes started through a provider's process API share (``modal``, ``prime``, ``daytona``).

They differ only in how they create the remote machine, start one command in it and carry that command's
stdin / stdout. Everything else lives here: the bootstrap program the command runs, the context streamed
over stdin in chunks straight from the host file (never a second full copy in memory, no upload API
needed), the host channel, the cell and restart rules, and the teardown on finish, error and cancellation.

The bootstrap reads one frame ``{worker, context_path, context_bytes}``, then that many raw bytes of
context, writes them into the sandbox's scratch folder and runs the unchanged worker on the same stdin.
A restart sends ``context_bytes = -1``: the context is already there. Providers whose process API carries
text rather than bytes (Daytona) use the ``base64`` transport: both directions travel as base64 lines,
re-encoded inside the sandbox around the worker. The bootstrap makes itself a process-group leader and
writes its pid to ``worker.pid`` so a provider without a kill call can stop the worker and all it started.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import json
import logging
import shlex
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Literal

from rlm_adapters.core.sandbox.base import SandboxSetup, write_context
from rlm_adapters.core.sandbox.cells import WorkerCells
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone
from rlm_adapters.core.sandbox.limits import (
    DEFAULT_CELL_TIMEOUT,
    DEFAULT_CPU_SECONDS,
    DEFAULT_FILE_SIZE,
    DEFAULT_MEMORY_BYTES,
    START_TIMEOUT,
    describe_exit,
    parse_size,
)
from rlm_adapters.core.sandbox.process import WORKER_PATH
from rlm_adapters.core.sandbox.worker import DEFAULT_CAPTURE_CHARS, HEADER, ProtocolError
from rlm_adapters.errors import ConfigurationError, SandboxError

logger = logging.getLogger("rlm_adapters.sandbox")

Transport = Literal["raw", "base64"]
# Largest piece written to a remote stdin at once: SDKs buffer a write in memory (Modal caps it at 2-16 MiB).
CHUNK = 1 << 20

BOOTSTRAP = r"""import base64, json, os, struct, sys, threading
scratch, mode = sys.argv[1], sys.argv[2]
os.makedirs(scratch, mode=0o700, exist_ok=True)
os.chdir(scratch)
try:
    os.setsid()
except OSError:
    pass
with open('worker.pid', 'w') as f:
    f.write(str(os.getpid()))
if mode == 'base64':
    def decode(src, dst):
        with os.fdopen(src, 'rb') as i, os.fdopen(dst, 'wb', buffering=0) as o:
            for line in i:
                if line.strip():
                    o.write(base64.b64decode(line))
    def encode(src, dst):
        with os.fdopen(src, 'rb', buffering=0) as i, os.fdopen(dst, 'wb', buffering=0) as o:
            while chunk := i.read(1 << 16):
                o.write(base64.b64encode(chunk) + b'\n')
    r, w = os.pipe()
    real_in = os.dup(0)
    os.dup2(r, 0)
    os.close(r)
    threading.Thread(target=decode, args=(real_in, w), daemon=True).start()
    r, w = os.pipe()
    real_out = os.dup(1)
    os.dup2(w, 1)
    os.close(w)
    threading.Thread(target=encode, args=(r, real_out), daemon=True).start()
r = sys.stdin.buffer
m = json.loads(r.read(struct.unpack('>I', r.read(4))[0]))
left = m['context_bytes']
if left >= 0:
    with open(m['context_path'] + '.part', 'wb') as f:
        while left:
            chunk = r.read(min(left, 1 << 20))
            if not chunk:
                sys.exit('context cut short')
            f.write(chunk)
            left -= len(chunk)
    os.replace(m['context_path'] + '.part', m['context_path'])
    os.chmod(m['context_path'], 0o444)
g = {'__name__': '__main__', '__file__': 'worker.py'}
exec(compile(m['worker'], 'worker.py', 'exec'), g)
"""
# Kills the worker's process group (the worker and everything it started): argv[1] is the scratch folder.
KILL_GROUP = (
    "import os, signal, sys\ntry:\n    os.killpg(int(open(sys.argv[1] + '/worker.pid').read()), signal.SIGKILL)\n"
    "except (OSError, ValueError):\n    pass"
)


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
        self._decoder = LineDecoder() if transport == "base64" else None
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


class RemoteSandbox(WorkerCells, ABC):
    """The worker in a provider's cloud sandbox, one per run; subclasses supply the provider's calls.

    Args:
        python: The interpreter inside the sandbox's image (needs only the standard library).
        cell_timeout: Wall seconds a cell may run before the worker is killed and restarted.
        memory_limit: The worker's address-space limit.
        cpu_time_limit: CPU seconds per cell.
        file_size_limit: Largest file the worker may write.
        capture_chars: How much of a cell's printed output is kept.
        sandbox_timeout: Seconds the cloud sandbox may live (the provider ends it after that).
        allow_internet_access: Off by default: model code reaches nothing but the host, through the frames.
    """

    kind: str = "remote"
    provider: str = "remote"
    credential: str = ""
    transport: Transport = "raw"
    scratch: str = "/tmp/rlm"

    def __init__(
        self,
        *,
        python: str = "python3",
        cell_timeout: float | None = DEFAULT_CELL_TIMEOUT,
        memory_limit: int | str | None = DEFAULT_MEMORY_BYTES,
        cpu_time_limit: float | None = DEFAULT_CPU_SECONDS,
        file_size_limit: int | str | None = DEFAULT_FILE_SIZE,
        capture_chars: int = DEFAULT_CAPTURE_CHARS,
        sandbox_timeout: int = 3600,
        allow_internet_access: bool = False,
    ) -> None:
        if sandbox_timeout <= 0:
            raise ConfigurationError(f"sandbox_timeout must be a positive number of seconds, not {sandbox_timeout!r}")
        self.python = python
        self.cell_timeout = cell_timeout
        self.memory_limit = parse_size(memory_limit)
        self.cpu_time_limit = cpu_time_limit
        self.file_size_limit = parse_size(file_size_limit)
        self.capture_chars = capture_chars
        self.sandbox_timeout = sandbox_timeout
        self.allow_internet_access = allow_internet_access
        self._setup: SandboxSetup | None = None
        self._context_file: Path | None = None
        self._process: RemoteProcess | None = None
        self._channel: HostChannel | None = None
        self._created = False
        self.starts = 0

    # -- what each provider supplies ---------------------------------------------------------------

    @abstractmethod
    async def _create_remote(self) -> None:
        """Create the cloud sandbox (raise `ConfigurationError` naming the missing credential)."""

    @abstractmethod
    async def _run(self, argv: list[str]) -> RemoteProcess:
        """Start `argv` in the sandbox with stdin open, stdout and stderr streamed back."""

    @abstractmethod
    async def _destroy_remote(self) -> None:
        """Delete the cloud sandbox and close the SDK's client (called once, only after a create)."""

    @abstractmethod
    def _describe(self) -> str:
        """The image, resources and region, for `isolation`."""

    # -- the shared part ---------------------------------------------------------------------------

    def missing_credential(self, how: str) -> ConfigurationError:
        """The error for a missing key, naming its environment variable and the kwarg alternative."""
        return ConfigurationError(
            f"environment={self.kind!r} needs {self.provider} credentials: set the {self.credential} environment "
            f"variable ({how})"
        )

    @property
    def isolation(self) -> str:
        """What the cloud sandbox gives."""
        net = "internet allowed" if self.allow_internet_access else "no internet access"
        return (
            f"{self.kind} cloud sandbox ({self._describe()}): a separate machine, {net}, no host environment "
            f"or files; limits: memory {self.memory_limit}, CPU {self.cpu_time_limit} s per cell, wall "
            f"{self.cell_timeout} s per cell, file size {self.file_size_limit}, output {self.capture_chars:,} chars"
        )

    def kill_argv(self) -> list[str]:
        """The program that ends the worker's process group (the worker and all it started)."""
        return [self.python, "-I", "-S", "-c", KILL_GROUP, self.scratch]

    def _env(self) -> dict[str, str]:
        """The worker's whole environment: none of the host's variables (keys stay on the host)."""
        return {"HOME": self.scratch, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

    async def start(self, setup: SandboxSetup) -> None:
        """Create the cloud sandbox, stream the worker and the context into it, start the worker."""
        self._setup = setup
        self._context_file = await write_context(setup)  # streamed in from here: written before a sandbox exists
        try:
            self._created = True
            await self._create_remote()
            await self._spawn(first=True)
        except (ConfigurationError, SandboxError):
            await self.aclose()
            raise
        except Exception as exc:
            await self.aclose()
            raise SandboxError(f"cannot start the {self.kind} sandbox: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            await self.aclose()  # cancelled while starting: the sandbox is still deleted
            raise

    async def _spawn(self, first: bool) -> None:
        assert self._setup is not None and self._context_file is not None
        argv = [self.python, "-I", "-S", "-c", BOOTSTRAP, self.scratch, self.transport]
        self._process = process = await self._run(argv)
        self.starts += 1
        context_file = self._context_file
        size = context_file.stat().st_size if first else -1
        boot = json.dumps(
            {
                "worker": WORKER_PATH.read_text(),
                "context_path": context_file.name,
                "context_bytes": size,
            }
        ).encode()
        await process.write(HEADER.pack(len(boot)) + boot)
        if first:
            await self._stream_file(process, context_file, size)
        self._channel = HostChannel(process.reader, process.write, self._setup.handler)
        try:
            await self._channel.start(self._init_message(), START_TIMEOUT)
        except (WorkerGone, TimeoutError) as exc:
            tail = "".join(process.stderr)[-500:].strip()
            raise SandboxError(
                f"the worker did not start in the {self.kind} sandbox: {exc or 'timed out'}. {tail}"
            ) from exc

    @staticmethod
    async def _stream_file(process: RemoteProcess, path: Path, size: int) -> None:
        """Send exactly `size` bytes of `path`, one chunk in memory at a time."""
        with path.open("rb") as handle:
            left = size
            while left > 0:
                chunk = await asyncio.to_thread(handle.read, min(CHUNK, left))
                if not chunk:
                    raise SandboxError(f"the context file {path} shrank while it was being sent")
                await process.write(chunk)
                left -= len(chunk)

    async def _how_it_ended(self) -> str:
        process = self._process
        if process is None:
            return describe_exit(None)
        code: int | None = None
        with contextlib.suppress(Exception):
            # The exit may be reported a moment after the output ends.
            code = await asyncio.wait_for(process.exit_code(), 5)
        return describe_exit(code)

    async def _stop_worker(self, *, kill: bool) -> None:
        """Close the channel; `kill` the worker unless the whole sandbox is about to be deleted anyway."""
        channel, process = self._channel, self._process
        self._channel = self._process = None
        if channel is not None:
            await channel.aclose()
        if process is not None:
            try:
                if kill:
                    await process.kill()
            except Exception as exc:
                logger.warning("could not stop the worker in the %s sandbox: %s", self.kind, exc)
            finally:
                await self._release(process)

    async def _release(self, process: RemoteProcess) -> None:
        try:
            await process.release()
        except Exception as exc:
            logger.warning("could not release the worker's handle in the %s sandbox: %s", self.kind, exc)
        finally:
            process.end_of_output()

    async def _restart(self) -> None:
        await self._stop_worker(kill=True)
        await self._spawn(first=False)

    async def aclose(self) -> None:
        """Delete the cloud sandbox with its worker (even after an error); safe to call twice."""
        process, self._process = self._process, None
        try:
            # Deleting the sandbox ends every process in it: no separate kill round trip.
            await self._stop_worker(kill=False)
        finally:
            created, self._created = self._created, False
            try:
                if created:
                    await self._destroy_remote()
            except Exception as exc:
                logger.warning("could not delete the %s sandbox: %s", self.kind, exc)
            finally:
                if process is not None:
                    await self._release(process)
