"""The ``docker`` sandbox: the same worker program in a container, through the docker SDK.

One container per run (``network_mode="none"``, memory and PID limits, read-only root file system, a
tmpfs scratch, a non-root user, no capabilities, none of the host's environment). Its first process
only reaps orphans; the worker runs beside it as an ``exec`` whose stdin / stdout carry the frames, so
a worker killed by a limit is replaced in the same container. Nothing of the host is mounted: the exec
runs the bootstrap program the cloud sandboxes run (see `shipping`), the worker's source and the context
travel over its stdin into the tmpfs scratch, and the worker starts, so a remote engine (``DOCKER_HOST``)
works the same as a local one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any, Unpack

from rlm_adapters._extras import require
from rlm_adapters.core.sandbox.base import SandboxSetup, write_context
from rlm_adapters.core.sandbox.cells import WorkerCells
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone
from rlm_adapters.core.sandbox.limits import START_TIMEOUT, LimitOptions, WorkerLimits, describe_exit
from rlm_adapters.core.sandbox.programs import sandbox_env
from rlm_adapters.core.sandbox.shipping import boot_frame, bootstrap_argv, send_context
from rlm_adapters.core.units import human_bytes, parse_size
from rlm_adapters.errors import SandboxError

logger = logging.getLogger("rlm_adapters.sandbox")

CONTAINER_SCRATCH = "/scratch"
# The container's PID 1: it reaps orphans (a worker's children outlive it) so zombies do not eat the PID limit.
CONTAINER_INIT = (
    "import os, time\nwhile True:\n    try:\n        os.waitpid(-1, 0)\n"
    "    except ChildProcessError:\n        time.sleep(1)"
)
KILL_ALL = "import os, signal\nos.kill(-1, signal.SIGKILL)"
# How long the engine may take to record an exec's exit after its stream ended (it handles the exit apart).
EXIT_WAIT = 3.0
PAUSE_ATTEMPTS = 3  # tries of the cgroup freeze between cells (one can time out under load)


def _docker() -> Any:
    return require("docker", extra="docker", feature="the docker sandbox")


def engine_problem(image: str) -> str | None:
    """Why containers cannot run here (no SDK, no engine answering, image missing), or None."""
    try:
        docker = _docker()
    except ImportError as exc:
        return str(exc)
    try:
        client = docker.from_env(timeout=5)
        client.ping()
    except Exception as exc:
        return f"no Docker engine answers at {client_address()} (install one, e.g. apt-get install docker.io): {exc}"
    try:
        client.images.get(image)
    except Exception as exc:
        return f"the image {image!r} is not on the engine (run .ci/setup_sandbox.sh): {exc}"
    finally:
        client.close()
    return None


def client_address() -> str:
    """The engine address the SDK will use."""
    import os

    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


class DemuxReader:
    """Splits docker's multiplexed exec stream: stdout into an asyncio reader, stderr into a tail."""

    def __init__(self, sock: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.stdout = asyncio.StreamReader(limit=2**31, loop=loop)
        self.stderr: collections.deque[str] = collections.deque(maxlen=64)
        self._sock = sock
        self._loop = loop
        self._thread = threading.Thread(target=self._run, name="rlm-docker-reader", daemon=True)
        self._thread.start()

    def _recv_exactly(self, n: int) -> bytes:
        data = bytearray()  # appended in place: linear in the payload, however it is split
        while len(data) < n:
            chunk = self._sock.recv(min(n - len(data), 1 << 20))
            if not chunk:
                break
            data += chunk
        return bytes(data)

    def _run(self) -> None:
        try:
            while True:
                header = self._recv_exactly(8)
                if len(header) < 8:
                    break
                size = int.from_bytes(header[4:8], "big")
                payload = self._recv_exactly(size)
                if header[0] == 1:
                    self._loop.call_soon_threadsafe(self.stdout.feed_data, payload)
                else:
                    self.stderr.append(payload[-8192:].decode("utf-8", "replace"))
                if len(payload) < size:
                    break
        except OSError:
            pass
        finally:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self.stdout.feed_eof)


class DockerSandbox(WorkerCells):
    """The worker in a locked-down container.

    Args:
        image: The image to run (needs a ``python3`` with the standard library; nothing is installed).
        python: The interpreter's path or name inside the image.
        scratch_size: Size of the tmpfs scratch folder.
        user: The (non-root) user the worker runs as.
        read_only_binds: Host folder -> container folder, mounted read-only (e.g. a host Python for a
            local test image); empty by default, and meaningless with a remote engine.
        client: A docker SDK client to use (default: ``docker.from_env()``, which honours DOCKER_HOST).
        **limits: The worker's limits (`LimitOptions`): ``memory_limit`` is the container's memory (and the
            worker's address space), ``process_limit`` its PID limit (processes + threads).
    """

    kind = "docker"

    def __init__(
        self,
        *,
        image: str = "python:3.12-slim",
        python: str = "python3",
        scratch_size: int | str = "1GiB",
        user: str = "65534:65534",
        read_only_binds: dict[str, str] | None = None,
        client: Any = None,
        **limits: Unpack[LimitOptions],
    ) -> None:
        self.limits = WorkerLimits.parse(limits)
        self.image = image
        self.python = python
        self.scratch_size = parse_size(scratch_size)
        self.user = user
        self.read_only_binds = dict(read_only_binds or {})
        self._client = client
        self._setup: SandboxSetup | None = None
        self._context_file: Path | None = None
        self.container: Any = None
        self._exec_id: str | None = None
        self._sock: Any = None
        self._stream: Any = None  # docker-py's socket file: it holds the HTTP response the connection belongs to
        self._demux: DemuxReader | None = None
        self._channel: HostChannel | None = None
        self._pausing: asyncio.Task[bool] | None = None  # the container's pause after a cell
        self._can_pause = True
        self.starts = 0

    @property
    def isolation(self) -> str:
        """What the container enforces."""
        scratch = f" of {human_bytes(self.scratch_size)}" if self.scratch_size else ""
        return (
            f"docker container (image {self.image!r}, engine {client_address()}): no network, read-only root, "
            f"tmpfs scratch{scratch}, user {self.user}, no capabilities, no host environment; {self.limits.describe()}"
        )

    async def start(self, setup: SandboxSetup) -> None:
        """Create the run's container and start the worker in it."""
        self._setup = setup
        self._context_file = await write_context(setup)
        try:
            if self._client is None:
                self._client = await asyncio.to_thread(lambda: _docker().from_env())  # the import too: off the loop
            self.container = await asyncio.to_thread(self._create)
            await self._spawn(first=True)
        except SandboxError:
            await self.aclose()
            raise
        except Exception as exc:
            await self.aclose()
            if isinstance(exc, _docker().errors.ImageNotFound):
                # The SDK's 404 names neither the image's absence nor the fix.
                raise SandboxError(
                    f"the Docker image {self.image!r} is not on the engine at {client_address()}: pull it there with "
                    f"`docker pull {self.image}` (or `docker load` / `docker build` it where no registry is "
                    "reachable), or choose an image that has python3"
                ) from exc
            raise SandboxError(f"cannot start the docker sandbox (image {self.image!r}): {exc}") from exc
        except BaseException:
            await self.aclose()  # cancelled while starting: still one container per run, removed
            raise

    def _create(self) -> Any:
        tmpfs_options = f"size={self.scratch_size},mode=1777,noexec" if self.scratch_size else "mode=1777"
        container = self._client.containers.create(
            self.image,
            command=[self.python, "-I", "-S", "-c", CONTAINER_INIT],
            network_mode="none",
            mem_limit=self.limits.memory_bytes,
            memswap_limit=self.limits.memory_bytes,
            pids_limit=self.limits.processes,
            read_only=True,
            tmpfs={CONTAINER_SCRATCH: tmpfs_options},
            user=self.user,
            environment=sandbox_env(CONTAINER_SCRATCH),
            volumes={host: {"bind": inside, "mode": "ro"} for host, inside in self.read_only_binds.items()},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            labels={"rlm-adapters": "sandbox"},
            detach=True,
        )
        container.start()
        return container

    def _context_path(self, name: str) -> str:
        return f"{CONTAINER_SCRATCH}/{name}"

    async def _spawn(self, first: bool) -> None:
        """Start the bootstrap and the worker as an exec; `first` sends the context too (else it is there)."""
        assert self._setup is not None and self._context_file is not None
        api = self._client.api
        exec_id = await asyncio.to_thread(
            api.exec_create,
            self.container.id,
            bootstrap_argv(self.python, CONTAINER_SCRATCH, "raw"),
            stdin=True,
            user=self.user,
            environment=sandbox_env(CONTAINER_SCRATCH),
            workdir=CONTAINER_SCRATCH,
        )
        self._exec_id = exec_id["Id"]
        socket_io = await asyncio.to_thread(api.exec_start, self._exec_id, socket=True)
        self._stream = socket_io
        self._sock = getattr(socket_io, "_sock", socket_io)
        # The SDK leaves its request timeout (60 s by default) on the hijacked socket: a cell that printed
        # nothing for that long would read as a dead worker. The cell's own limits bound the wait instead.
        self._sock.settimeout(None)
        self.starts += 1
        self._demux = DemuxReader(self._sock, asyncio.get_running_loop())
        context_file = self._context_file
        size = context_file.stat().st_size if first else -1
        await self._send(boot_frame(self._context_path(context_file.name), size))
        if first:
            await send_context(self._send, context_file, size)
        self._channel = HostChannel(self._demux.stdout, self._send, self._setup.handler)
        try:
            await self._channel.start(self._init_message(), START_TIMEOUT)
        except (WorkerGone, TimeoutError, OSError) as exc:
            tail = "".join(self._demux.stderr)[-500:].strip()
            raise SandboxError(f"the worker did not start in the container: {exc or 'timed out'}. {tail}") from exc

    async def _send(self, data: bytes) -> None:
        await asyncio.to_thread(self._sock.sendall, data)

    async def _how_it_ended(self) -> str:
        return describe_exit(await asyncio.to_thread(self._exit_code))

    def _exit_code(self) -> int | None:
        """The worker exec's exit code; the engine records it a moment after the stream ends, so wait a little."""
        if self._exec_id is None:
            return None
        deadline = time.monotonic() + EXIT_WAIT
        while True:
            try:
                info = self._client.api.exec_inspect(self._exec_id)
            except Exception:
                return None
            code = info.get("ExitCode")
            if not info.get("Running") or time.monotonic() > deadline:
                return code if isinstance(code, int) else None
            time.sleep(0.05)

    async def _rest(self) -> None:
        """Pause the container (cgroup freezer) until the next cell: nothing a cell left behind runs meanwhile.

        The pause goes on in the background (an engine round trip), so the cell's result is not held up.
        """
        if self.container is not None and self._can_pause:
            self._pausing = asyncio.create_task(asyncio.to_thread(self._pause_container))

    def _pause_container(self) -> bool:
        # On a busy machine runc's freeze can time out ("unable to freeze") while the cell's leftovers spin:
        # tried again before giving up. An engine with no freezer fails every time: said once, the sandbox runs on.
        for attempt in range(PAUSE_ATTEMPTS):
            try:
                self.container.pause()
                return True
            except Exception as exc:
                if attempt + 1 == PAUSE_ATTEMPTS:
                    self._can_pause = False
                    logger.warning("docker sandbox: cannot pause the container between cells: %s", exc)
                    return False
                time.sleep(0.1 * (attempt + 1))
        return False

    async def _wake(self) -> None:
        pausing, self._pausing = self._pausing, None
        if pausing is not None and await pausing and self.container is not None:
            await asyncio.to_thread(self.container.unpause)

    async def _stop_worker(self) -> None:
        with contextlib.suppress(Exception):
            await self._wake()  # an exec into a paused container would fail
        channel, sock, stream = self._channel, self._sock, self._stream
        self._channel = self._sock = self._stream = None
        if channel is not None:
            await channel.aclose()
        if sock is not None:
            # `close` alone leaves the connection open while the SDK's socket file still refers to it (until
            # a garbage collection): the engine would go on feeding the old exec and its reader thread.
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        if stream is not None and stream is not sock:
            with contextlib.suppress(OSError):
                stream.close()
        if self.container is not None:
            # Every process of the sandbox user but PID 1 (the reaper): the worker and all it started.
            with contextlib.suppress(Exception):
                await asyncio.to_thread(
                    self.container.exec_run, [self.python, "-I", "-S", "-c", KILL_ALL], user=self.user
                )

    async def _restart(self) -> None:
        await self._stop_worker()
        await self._spawn(first=False)

    async def aclose(self) -> None:
        """Remove the container (even after an error); safe to call twice."""
        await self._stop_worker()
        container, self.container = self.container, None
        if container is not None:
            try:
                await asyncio.to_thread(container.remove, force=True)
            except Exception as exc:
                logger.warning("could not remove the sandbox container %s: %s", container.id[:12], exc)
