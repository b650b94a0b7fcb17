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
import functools
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any, Unpack

from rlm_adapters.core.sandbox.base import SandboxSetup, write_context
from rlm_adapters.core.sandbox.cells import WorkerCells, init_message
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone
from rlm_adapters.core.sandbox.context_store import CONTEXTS, ContextLease
from rlm_adapters.core.sandbox.limits import (
    START_TIMEOUT,
    LimitOptions,
    WorkerLimits,
    describe_exit,
    seconds_text,
    size_text,
)
from rlm_adapters.core.sandbox.programs import WORKER_FOLDER
from rlm_adapters.core.sandbox.reaper import REAPER
from rlm_adapters.core.sandbox.subprocess.cgroups import SandboxCgroup
from rlm_adapters.core.sandbox.subprocess.isolation import (
    DESCRIPTIONS,
    IsolationLevel,
    IsolationRequest,
    Launch,
    Reach,
    detect_level,
    probed,
    worker_binds,
)
from rlm_adapters.core.sandbox.subprocess.pause import SandboxPause
from rlm_adapters.core.sandbox.subprocess.process import (
    SpareKey,
    Worker,
    dispose,
    kill_now,
    new_worker,
    place_context,
    spawn,
    wait_exit,
)
from rlm_adapters.core.sandbox.subprocess.spares import POOL
from rlm_adapters.errors import SandboxError

logger = logging.getLogger("rlm_adapters.sandbox")


STDERR_KEEP = 8192
STDERR_CHUNK = 65536


class _Pipes:
    """The worker's three pipes, connected to the running event loop.

    The process is started with `subprocess.Popen` rather than asyncio, so that a spare worker started
    before (in another thread, or under an event loop since closed) can be handed to any run.
    """

    def __init__(self, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader, stdin: asyncio.StreamWriter) -> None:
        self.stdout = stdout
        self.stderr = stderr
        self.stdin = stdin
        self._transports: list[asyncio.BaseTransport] = []

    @classmethod
    async def attach(cls, popen: subprocess.Popen[bytes]) -> _Pipes:
        assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
        loop = asyncio.get_running_loop()
        transports: list[asyncio.BaseTransport] = []
        try:
            readers = []
            for pipe in (popen.stdout, popen.stderr):
                reader = asyncio.StreamReader(loop=loop)
                read_transport, _ = await loop.connect_read_pipe(
                    functools.partial(asyncio.StreamReaderProtocol, reader), pipe
                )
                transports.append(read_transport)
                readers.append(reader)
            write_transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, popen.stdin)
            transports.append(write_transport)
        except BaseException:
            for transport in transports:
                transport.close()
            raise
        pipes = cls(readers[0], readers[1], asyncio.StreamWriter(write_transport, protocol, None, loop))
        pipes._transports = transports
        return pipes

    def close(self) -> None:
        for transport in self._transports:
            transport.close()


class SubprocessSandbox(WorkerCells):
    """The worker in a child process, inside the strongest boundary this system allows.

    On Linux with bubblewrap the worker runs in new user, network, mount, PID and IPC namespaces and
    sees only the Python runtime (read-only), its scratch folder and the context file (read-only); the
    worker then raises Landlock and a seccomp filter itself. The level reached is in `isolation`.
    Every limit ends the cell with a message that names it; the run continues.

    Args:
        isolation: ``"auto"``: the strongest level that keeps the host's files and network out of reach
            (bubblewrap, else unshare with Landlock and seccomp), or an error at start naming the fixes;
            or exactly ``"bwrap"``, ``"unshare"``, ``"process"`` (an error if it cannot be built here; a
            weaker level chosen this way runs, and is named in the result, the log and the header).
        python: The interpreter that runs the worker (default: this one).
        warm_spare: Keep one pre-started worker per launch shape (interpreter, isolation, limits) so the
            next run level, nested ones included, starts without waiting for bubblewrap and Python
            (see `spares`). False starts every worker on demand.
        **limits: The worker's limits (`LimitOptions`, parsed into `WorkerLimits`): ``cell_timeout``;
            ``memory_limit``, the memory of the whole sandbox (a cgroup counts every process and the tmpfs
            pages where a memory controller is writable; each process's address space is capped at it as
            well); ``cpu_time_limit``; ``process_limit``, processes + threads (cgroup ``pids`` where
            writable, else RLIMIT_NPROC for a non-root user); ``file_size_limit``, the largest file and,
            under bubblewrap and unshare, the size of the scratch tmpfs (all files together);
            ``capture_chars``, how much of a cell's printed output is kept (the rest is counted).
    """

    _gone = (WorkerGone, ConnectionError)  # a broken pipe to the worker: it is gone

    kind = "subprocess"

    def __init__(
        self,
        *,
        isolation: IsolationRequest = "auto",
        python: str | None = None,
        warm_spare: bool = True,
        **limits: Unpack[LimitOptions],
    ) -> None:
        self.limits = WorkerLimits.parse(limits)
        if isolation not in ("auto", "bwrap", "unshare", "process"):
            raise ValueError(f"isolation must be 'auto', 'bwrap', 'unshare' or 'process', not {isolation!r}")
        self.isolation_request: IsolationRequest = isolation
        self.python = python or sys.executable
        self.warm_spare = warm_spare
        self._reach: Reach | None = None
        self._cgroup: SandboxCgroup | None = None
        self._nproc_rlimit = False
        self._setup: SandboxSetup | None = None
        self._launch: Launch | None = None
        self._worker: Worker | None = None
        self._context_name: str | None = None
        self._lease: ContextLease | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pipes: _Pipes | None = None
        self._channel: HostChannel | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=64)
        self._stderr_task: asyncio.Task[None] | None = None
        self._pause = SandboxPause()
        self.worker_pid: int | None = None
        self.starts = 0

    def blocking_setup(self) -> Callable[[], None] | None:
        """The first sandbox of a process probes the isolation levels (starting processes: 0.1-0.5 s) and
        compiles the worker's bytecode; `open_sandbox` runs that in a worker thread. None once it is done."""
        if self._reach is not None or probed(self.isolation_request, self.python):
            return None
        return self._first_use

    def _first_use(self) -> None:
        if self.reach.level == "bwrap":
            worker_binds(WORKER_FOLDER)  # the bytecode each launch binds, compiled once per process

    @property
    def reach(self) -> Reach:
        """The level and walls reached (probed on first use).

        Raises:
            SandboxError: The level asked for is missing, or ``auto`` found none that hides the host.
        """
        if self._reach is None:
            try:
                self._reach = detect_level(self.isolation_request, self.python)
            except RuntimeError as exc:
                raise SandboxError(str(exc)) from None
            if not self._reach.contains_host:
                logger.warning(
                    "subprocess sandbox: isolation %r was asked for explicitly; model code is not kept away "
                    "from the host's files and network as the default would",
                    self._reach.name,
                )
        return self._reach

    @property
    def level(self) -> IsolationLevel:
        """The launcher level (probed on first use; raises `SandboxError` if none fits the request)."""
        return self.reach.level

    @property
    def isolation(self) -> str:
        """The level reached and every limit in force, stated plainly (never weaker than the truth).

        It starts with the machine-readable `Reach.name` (e.g. ``bwrap (bundled) + landlock 7 + seccomp``)
        up to the first ``;``.
        """
        reach, limits = self.reach, self.limits
        groups = self._cgroup.controllers if self._cgroup is not None else ()
        if limits.processes is None:
            procs = "none"
        elif "pids" in groups:
            procs = f"{limits.processes} (cgroup pids)"
        elif self._nproc_rlimit:
            procs = f"{limits.processes} (RLIMIT_NPROC, counts all of the user's processes)"
        elif self._process is None:
            procs = f"{limits.processes} (applied at start)"
        else:
            procs = "not enforced (no writable cgroup and running as root)"
        memory = size_text(limits.memory_bytes)
        if limits.memory_bytes is None:
            pass
        elif "memory" in groups:
            memory += " for the whole sandbox, tmpfs included (cgroup memory)"
        elif self._process is None:
            memory += " (applied at start)"
        else:
            memory += " per process (no writable memory cgroup: not a total)"
        files = size_text(limits.file_size_bytes)
        if reach.level != "process" and limits.file_size_bytes is not None:
            files += " per file and in total (size-capped scratch tmpfs)"
        protection = (
            "context file in a read-only bind mount"
            if reach.level == "bwrap"
            else "context file read-only under Landlock"
            if reach.landlock
            else "context file write-protected by its mode only (model code runs as the host user and could alter it)"
        )
        return (
            f"{reach.name}; {DESCRIPTIONS[reach.level]}; {reach.walls_text()}; limits: memory {memory}, CPU "
            f"{seconds_text(limits.cpu_seconds)} per cell, {seconds_text(limits.cell_timeout)} of computing per cell, "
            f"processes+threads {procs}, files {files}, output {limits.capture_chars:,} chars per cell; {protection}"
        )

    def _init_message(self) -> dict[str, Any]:
        assert self._setup is not None and self._launch is not None and self._context_name is not None
        return init_message(
            self._setup,
            f"{self._launch.context_dir}/{self._context_name}",
            self.limits,
            processes=self._nproc_rlimit,
            shared=self._lease is not None,
        )

    def spare_key(self) -> SpareKey:
        """The launch shape of this sandbox's workers (probes the isolation level on first use)."""
        return SpareKey.of(self.python, self.reach, self.limits)

    @property
    def shares_context(self) -> bool:
        """Whether this sandbox's worker gets the process's one shared file of its context (`CONTEXTS`).

        Only where a wall keeps the file read-only to model code: bubblewrap's read-only bind mount, or
        Landlock from ABI 3 (which also refuses truncation; model code owns the file's inode there and can
        change its mode). Under its mode only, a run could change what another reads: each run writes its own.
        """
        reach = self.reach
        return reach.level == "bwrap" or reach.landlock >= 3

    async def start(self, setup: SandboxSetup) -> None:
        """Take a spare worker (or start one), give it the context, and wait for it to be ready."""
        # Before any process: a failed write leaves none.
        if self.shares_context:
            self._lease = await CONTEXTS.acquire(setup.context)
            context_file = self._lease.path
        else:
            context_file = await write_context(setup)
        self._setup = setup
        try:
            key = self.spare_key()
            # No await between getting the worker and owning it: a cancelled start still closes it.
            worker = POOL.take(key) if self.warm_spare else None
            spare = worker is not None
            if worker is None:
                try:
                    worker = new_worker(key)
                except OSError as exc:
                    raise SandboxError(f"cannot start the sandbox worker ({self.python!r}): {exc}") from exc
                POOL.own(worker)
            else:
                logger.debug("subprocess sandbox: took the spare worker pid %d", worker.popen.pid)
            self._adopt(worker)
            if self.warm_spare and spare:
                POOL.replenish(key)  # the key is known to start: refill at once, while this one loads
            try:
                self._context_name = place_context(context_file, worker)
            except OSError as exc:
                raise SandboxError(f"cannot give the context file to the sandbox worker: {exc}") from exc
            await self._connect()
            if self.warm_spare and not spare:
                POOL.replenish(key)  # only once a worker of this shape did start
        except BaseException:
            await self.aclose()  # a failed start leaves neither a process, a cgroup nor a folder behind
            raise

    def _adopt(self, worker: Worker) -> None:
        self._worker = worker
        self._launch = worker.launch
        self._cgroup = worker.cgroup
        # RLIMIT_NPROC binds only non-root users and counts all their processes: a fallback, stated as such.
        pids_held = self._cgroup is not None and "pids" in self._cgroup.controllers
        self._nproc_rlimit = not pids_held and self.limits.processes is not None and os.geteuid() != 0
        self._process = worker.popen

    async def _spawn(self) -> None:
        """Start a fresh worker with the same launch, folders and cgroup (after a restart)."""
        assert self._launch is not None
        try:
            self._process = spawn(self._launch, self._cgroup)
            if self._worker is not None:
                self._worker.popen = self._process  # what to kill at exit, should this run never close
        except OSError as exc:
            raise SandboxError(f"cannot start the sandbox worker ({self._launch.argv[0]!r}): {exc}") from exc
        await self._connect()

    async def _connect(self) -> None:
        assert self._process is not None and self._setup is not None
        process = self._process
        self.starts += 1
        self.worker_pid = process.pid
        self._pipes = pipes = await _Pipes.attach(process)
        self._stderr_task = asyncio.create_task(self._drain_stderr(pipes.stderr))
        self._channel = HostChannel(pipes.stdout, self._write, self._setup.handler)
        try:
            await self._channel.start(self._init_message(), START_TIMEOUT)
        except (WorkerGone, TimeoutError, ConnectionError) as exc:
            await self._kill()
            detail = self._stderr_tail()
            raise SandboxError(f"the sandbox worker did not start: {exc or 'timed out'}. {detail}".strip()) from exc

    async def _write(self, data: bytes) -> None:
        if self._pipes is None:
            raise ConnectionError("the sandbox worker is gone")
        self._pipes.stdin.write(data)
        await self._pipes.stdin.drain()

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        # Always drained, in chunks (a line over the reader's 64 KiB limit would stop `readline`), keeping
        # a bounded tail: a full stderr pipe would block the worker.
        with contextlib.suppress(Exception):
            while chunk := await stream.read(STDERR_CHUNK):
                self._stderr.append(chunk.decode("utf-8", "replace"))

    def _stderr_tail(self) -> str:
        text = "".join(self._stderr)[-STDERR_KEEP:].strip()
        return f"Worker stderr: {text[-500:]}" if text else ""

    async def _how_it_ended(self) -> str:
        return describe_exit(await self._wait_exit())

    async def _wait_exit(self) -> int | None:
        if self._process is None:
            return None
        return await wait_exit(self._process, 1.0)

    async def _restart(self) -> None:
        await self._kill()
        await self._spawn()

    async def _wake(self) -> None:
        self._pause.resume()

    async def _rest(self) -> None:
        if self._process is not None:
            self._pause.stop(self._process.pid, self._cgroup)

    async def _kill(self, *, reap: bool = True) -> None:
        """Kill the worker and everything it started, and disconnect it.

        Args:
            reap: Also wait for the process to exit (a restart reuses the cgroup and folders); a final
                close leaves the waiting to the reaper.
        """
        process, channel, pipes = self._process, self._channel, self._pipes
        self._process = self._channel = self._pipes = None
        if process is not None:
            # Kill first, with no await before it: a cancelled caller may not get another turn.
            kill_now(process)
        self._pause.forget()  # SIGKILL ends stopped processes too
        if self._cgroup is not None:
            # Anything that left the process group (setsid, a daemon) is still in the cgroup.
            self._cgroup.kill_all()
        if channel is not None:
            await channel.aclose()
        if pipes is not None:
            pipes.close()
        if process is not None and reap:
            await wait_exit(process)
            for stream in (process.stdin, process.stdout, process.stderr):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            if self._cgroup is not None:
                self._cgroup.kill_all()  # what was forked between the two kills
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task
            self._stderr_task = None

    async def aclose(self) -> None:
        """Kill the worker and everything it started; its cgroup and folders go in the background.

        When this returns, every process of the sandbox has been sent SIGKILL; reaping them and removing
        the cgroup and the folders is left to `REAPER` (its `flush` waits for it).
        """
        await self._kill(reap=False)
        worker, self._worker, self._cgroup = self._worker, None, None
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()  # the worker's own link keeps the file until its folder goes
        if worker is not None:
            REAPER.submit(functools.partial(_dispose_and_release, worker))


def _dispose_and_release(worker: Worker) -> None:
    """The reaper's half of a close: reap the worker, remove its cgroup and folders, free its pool place."""
    dispose(worker)
    POOL.release(worker)
