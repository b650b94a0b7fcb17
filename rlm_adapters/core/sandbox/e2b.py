"""The ``e2b`` sandbox: the same worker program in an E2B cloud sandbox.

The worker's source, a small stdout codec and the context are uploaded as files; the worker is started
as a background command whose stdin carries the host's frames as raw bytes. E2B hands a command's
stdout back as text, which would mangle binary frame headers, so the codec runs the unchanged worker
with its protocol output re-encoded as base64 lines that the host decodes. Sub-calls are answered on
the host (keys and budget never leave it). The key comes from ``E2B_API_KEY`` (or ``api_key=``).
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.sandbox.base import SandboxSetup, write_context
from rlm_adapters.core.sandbox.cells import WorkerCells
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone
from rlm_adapters.core.sandbox.limits import (
    DEFAULT_CELL_TIMEOUT,
    DEFAULT_CPU_SECONDS,
    DEFAULT_FILE_SIZE,
    DEFAULT_MEMORY_BYTES,
    START_TIMEOUT,
    parse_size,
)
from rlm_adapters.core.sandbox.process import WORKER_PATH
from rlm_adapters.core.sandbox.remote import LineDecoder
from rlm_adapters.core.sandbox.worker import DEFAULT_CAPTURE_CHARS
from rlm_adapters.errors import ConfigurationError, SandboxError

SCRATCH = "/home/user/rlm"
# Runs the worker with its protocol output (fd 1) re-encoded as base64 lines on the real stdout.
CODEC = """import base64, os, runpy, sys, threading
real_out = os.dup(1)
r, w = os.pipe()
os.dup2(w, 1)
os.close(w)
def pump():
    with os.fdopen(r, 'rb', buffering=0) as src, os.fdopen(real_out, 'wb', buffering=0) as dst:
        while chunk := src.read(1 << 16):
            dst.write(base64.b64encode(chunk) + b'\\n')
pumper = threading.Thread(target=pump, daemon=True)
pumper.start()
sys.argv = [sys.argv[1]]
try:
    runpy.run_path(sys.argv[0], run_name='__main__')
finally:
    os.close(1)
    pumper.join(1)
"""

SandboxFactory = Callable[..., Awaitable[Any]]


class E2BSandbox(WorkerCells):
    """The worker in an E2B sandbox, one per run.

    Args:
        template: The E2B template (default: E2B's base template, which has ``python3``).
        api_key: The E2B key (default: the ``E2B_API_KEY`` environment variable).
        cell_timeout: Wall seconds a cell may run before the worker is killed and restarted.
        memory_limit: The worker's address-space limit.
        cpu_time_limit: CPU seconds per cell.
        file_size_limit: Largest file the worker may write.
        capture_chars: How much of a cell's printed output is kept.
        sandbox_timeout: Seconds the cloud sandbox may live.
        allow_internet_access: Off by default: model code reaches nothing but the host.
        sandbox_factory: Creates the sandbox (default: ``e2b.AsyncSandbox.create``); tests pass a fake.
    """

    kind = "e2b"

    def __init__(
        self,
        *,
        template: str | None = None,
        api_key: str | None = None,
        cell_timeout: float | None = DEFAULT_CELL_TIMEOUT,
        memory_limit: int | str | None = DEFAULT_MEMORY_BYTES,
        cpu_time_limit: float | None = DEFAULT_CPU_SECONDS,
        file_size_limit: int | str | None = DEFAULT_FILE_SIZE,
        capture_chars: int = DEFAULT_CAPTURE_CHARS,
        sandbox_timeout: int = 3600,
        allow_internet_access: bool = False,
        sandbox_factory: SandboxFactory | None = None,
    ) -> None:
        self.template = template
        self.api_key = api_key
        self.cell_timeout = cell_timeout
        self.memory_limit = parse_size(memory_limit)
        self.cpu_time_limit = cpu_time_limit
        self.file_size_limit = parse_size(file_size_limit)
        self.capture_chars = capture_chars
        self.sandbox_timeout = sandbox_timeout
        self.allow_internet_access = allow_internet_access
        self._factory = sandbox_factory
        self._setup: SandboxSetup | None = None
        self._context_file: Path | None = None
        self.remote: Any = None
        self._handle: Any = None
        self._decoder: LineDecoder | None = None
        self._channel: HostChannel | None = None
        # A bounded tail: model code may write without end to stderr.
        self._stderr: collections.deque[str] = collections.deque(maxlen=64)
        self.starts = 0

    @property
    def isolation(self) -> str:
        """What the cloud sandbox gives."""
        net = "internet allowed" if self.allow_internet_access else "no internet access"
        return (
            f"e2b cloud sandbox (template {self.template or 'base'}): a separate VM, {net}, no host environment "
            f"or files; limits: memory {self.memory_limit}, CPU {self.cpu_time_limit} s per cell, wall "
            f"{self.cell_timeout} s per cell, file size {self.file_size_limit}, output {self.capture_chars:,} chars"
        )

    async def _create(self) -> Any:
        if self._factory is not None:
            return await self._factory(template=self.template, timeout=self.sandbox_timeout, envs={})
        key = self.api_key or os.environ.get("E2B_API_KEY")
        if not key:
            raise ConfigurationError(
                "environment='e2b' needs an E2B API key: set the E2B_API_KEY environment variable "
                "(or pass environment_kwargs={'api_key': ...})"
            )
        e2b = require("e2b", extra="e2b", feature="the e2b sandbox")
        return await e2b.AsyncSandbox.create(
            template=self.template,
            api_key=key,
            timeout=self.sandbox_timeout,
            envs={},
            allow_internet_access=self.allow_internet_access,
        )

    async def start(self, setup: SandboxSetup) -> None:
        """Create the cloud sandbox, upload the worker and the context, start the worker."""
        self._setup = setup
        try:
            self.remote = await self._create()
            await self.remote.files.write(f"{SCRATCH}/worker.py", WORKER_PATH.read_bytes())
            await self.remote.files.write(f"{SCRATCH}/rlm_codec.py", CODEC)
            self._context_file = await write_context(setup)
            with self._context_file.open("rb") as handle:
                await self.remote.files.write(f"{SCRATCH}/{self._context_file.name}", handle)
            await self._spawn()
        except ConfigurationError:
            raise
        except SandboxError:
            await self.aclose()
            raise
        except Exception as exc:
            await self.aclose()
            raise SandboxError(f"cannot start the e2b sandbox: {type(exc).__name__}: {exc}") from exc

    # Unlike Docker and the other cloud sandboxes, an OSError here is not taken for a dead worker.
    _gone = (WorkerGone,)

    async def _spawn(self) -> None:
        assert self._setup is not None
        self._decoder = decoder = LineDecoder()
        self._handle = await self.remote.commands.run(
            f"python3 -I -S {SCRATCH}/rlm_codec.py {SCRATCH}/worker.py",
            background=True,
            stdin=True,
            envs={},
            cwd=SCRATCH,
            on_stdout=decoder.feed,
            on_stderr=self._stderr.append,
            timeout=0,
        )
        self.starts += 1
        self._channel = HostChannel(decoder.reader, self._write, self._setup.handler)
        try:
            await self._channel.start(self._init_message(), START_TIMEOUT)
        except (WorkerGone, TimeoutError) as exc:
            tail = "".join(self._stderr)[-500:].strip()
            raise SandboxError(f"the worker did not start in the e2b sandbox: {exc or 'timed out'}. {tail}") from exc

    async def _write(self, data: bytes) -> None:
        await self.remote.commands.send_stdin(self._handle.pid, data)

    async def _how_it_ended(self) -> str:
        return "ended"

    async def _stop_worker(self) -> None:
        channel, handle, decoder = self._channel, self._handle, self._decoder
        self._channel = self._handle = self._decoder = None
        if channel is not None:
            await channel.aclose()
        if handle is not None:
            with contextlib.suppress(Exception):
                await handle.kill()
        if decoder is not None:
            decoder.close()

    async def _restart(self) -> None:
        await self._stop_worker()
        await self._spawn()

    async def aclose(self) -> None:
        """Kill the worker and the cloud sandbox; safe to call twice."""
        await self._stop_worker()
        remote, self.remote = self.remote, None
        if remote is not None:
            with contextlib.suppress(Exception):
                await remote.kill()
