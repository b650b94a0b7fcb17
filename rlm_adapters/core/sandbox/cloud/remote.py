"""What the cloud sandboxes share (``e2b``, ``modal``, ``prime``, ``daytona``): one per run, the worker shipped in.

They differ only in how they create the remote machine, start one command in it and carry that command's
stdin / stdout (`transport`). Everything else lives here: the command is the bootstrap program, which
receives the worker and the context over stdin (see `shipping`; a provider with a file API may upload the
context instead), then the host channel, the cell and restart rules, and the teardown on finish, error
and cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Unpack

from rlm_adapters._extras import require_off_loop
from rlm_adapters.core.sandbox.base import SandboxSetup, write_context
from rlm_adapters.core.sandbox.cells import WorkerCells
from rlm_adapters.core.sandbox.channel import HostChannel, WorkerGone
from rlm_adapters.core.sandbox.cloud.transport import RemoteProcess
from rlm_adapters.core.sandbox.limits import START_TIMEOUT, LimitOptions, WorkerLimits, describe_exit
from rlm_adapters.core.sandbox.programs import sandbox_env
from rlm_adapters.core.sandbox.shipping import Transport, boot_frame, bootstrap_argv, kill_group_argv, send_context
from rlm_adapters.errors import ConfigurationError, SandboxError

logger = logging.getLogger("rlm_adapters.sandbox")


class RemoteSandbox(WorkerCells, ABC):
    """The worker in a provider's cloud sandbox, one per run; subclasses supply the provider's calls.

    Args:
        python: The interpreter inside the sandbox's image (needs only the standard library).
        sandbox_timeout: Seconds the cloud sandbox may live (the provider ends it after that).
        allow_internet_access: Off by default: model code reaches nothing but the host, through the frames.
        **limits: The worker's limits (`LimitOptions`: ``cell_timeout``, ``memory_limit`` (its address
            space), ``cpu_time_limit``, ``file_size_limit``, ``capture_chars``; no ``process_limit``).
    """

    kind: str = "remote"
    provider: str = "remote"
    credential: str = ""  # the environment variable that holds the provider's key
    transport: Transport = "raw"
    scratch: str = "/tmp/rlm"

    def __init__(
        self,
        *,
        python: str = "python3",
        sandbox_timeout: int = 3600,
        allow_internet_access: bool = False,
        **limits: Unpack[LimitOptions],
    ) -> None:
        self.limits = WorkerLimits.parse(limits, processes=False)
        if sandbox_timeout <= 0:
            raise ConfigurationError(f"sandbox_timeout must be a positive number of seconds, not {sandbox_timeout!r}")
        self.python = python
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

    def _sdk_parts(self) -> tuple[str, tuple[str, ...]] | None:
        """The provider's SDK module and the names `_create_remote` and `_run` take from it (None: an injected
        SDK or client needs none); `start` loads them in a worker thread, off the event loop."""
        return None

    async def _upload(self, context_file: Path) -> bool:
        """Put the context file into the scratch folder with the provider's file API; False: stream it over stdin."""
        return False

    # -- the shared part ---------------------------------------------------------------------------

    @classmethod
    def unset_credential(cls, environ: Mapping[str, str]) -> str | None:
        """The variable that must hold this provider's key when `environ` lacks it (None: a key is there)."""
        return cls.credential if cls.credential and not environ.get(cls.credential) else None

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
            f"or files; {self.limits.describe()}"
        )

    def kill_argv(self) -> list[str]:
        """The program that ends the worker's process group (the worker and all it started)."""
        return kill_group_argv(self.python, self.scratch)

    def _env(self) -> dict[str, str]:
        """The worker's whole environment: none of the host's variables (keys stay on the host)."""
        return sandbox_env(self.scratch)

    async def start(self, setup: SandboxSetup) -> None:
        """Create the cloud sandbox, ship the worker and the context into it, start the worker."""
        self._setup = setup
        self._context_file = await write_context(setup)  # streamed in from here: written before a sandbox exists
        try:
            if (sdk := self._sdk_parts()) is not None:
                module, names = sdk
                await require_off_loop(module, extra=self.kind, feature=f"the {self.kind} sandbox", names=names)
            self._created = True
            await self._create_remote()
            uploaded = await self._upload(self._context_file)
            await self._spawn(first=not uploaded)
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
        """Start the bootstrap and the worker; `first` sends the context too (else it is already there)."""
        assert self._setup is not None and self._context_file is not None
        self._process = process = await self._run(bootstrap_argv(self.python, self.scratch, self.transport))
        self.starts += 1
        context_file = self._context_file
        size = context_file.stat().st_size if first else -1
        await process.write(boot_frame(context_file.name, size))
        if first:
            await send_context(process.write, context_file, size)
        self._channel = HostChannel(process.reader, process.write, self._setup.handler)
        try:
            await self._channel.start(self._init_message(), START_TIMEOUT)
        except (WorkerGone, TimeoutError) as exc:
            tail = "".join(process.stderr)[-500:].strip()
            raise SandboxError(
                f"the worker did not start in the {self.kind} sandbox: {exc or 'timed out'}. {tail}"
            ) from exc

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
