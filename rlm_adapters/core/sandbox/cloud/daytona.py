"""The ``daytona`` sandbox: the same worker program in a Daytona sandbox (``daytona`` SDK).

One sandbox per run (a snapshot, or an image with CPU / memory / disk, from ``environment_kwargs``;
``network_block_all`` unless internet access is asked for; a wall-clock TTL). The worker runs as an
asynchronous command in a session of its own. Daytona carries a command's input and output as text,
so both directions travel as base64 lines (the ``base64`` transport of `shipping`): input through
``send_session_command_input``, output from the streamed logs. The key comes from ``DAYTONA_API_KEY``
(or ``api_key=``).
"""

from __future__ import annotations

import asyncio
import math
import os
import shlex
import uuid
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from rlm_adapters.core.sandbox.cloud.transport import RemoteProcess, command_line
from rlm_adapters.errors import ConfigurationError


class DaytonaProcess(RemoteProcess):
    """A session command, its logs streamed into the channel's reader; killed with its session."""

    def __init__(self, remote: Any, session_id: str, command_id: str, kill_command: str) -> None:
        super().__init__("base64")
        self.remote = remote
        self.kill_command = kill_command
        self.session_id = session_id
        self.command_id = command_id
        self.own(self._follow())

    async def _follow(self) -> None:
        try:
            await self.remote.process.get_session_command_logs_async(
                self.session_id, self.command_id, self.feed_stdout, self.feed_stderr
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.feed_stderr(f"[the log stream broke: {type(exc).__name__}: {exc}]")
        finally:
            self.end_of_output()

    async def send(self, data: bytes) -> None:
        await self.remote.process.send_session_command_input(self.session_id, self.command_id, data.decode("ascii"))

    async def kill(self) -> None:
        # The worker made itself a session of its own: end its group first, then the session's shell.
        try:
            await self.remote.process.exec(self.kill_command, timeout=30)
        finally:
            await self.remote.process.delete_session(self.session_id)

    async def exit_code(self) -> int | None:
        # The API has no wait: the exit code shows up a moment after the output ends (the caller bounds this).
        delay = 0.05
        while True:
            command = await self.remote.process.get_session_command(self.session_id, self.command_id)
            if isinstance(command.exit_code, int):
                return int(command.exit_code)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)


SDK_NAMES = (
    "AsyncDaytona",
    "DaytonaConfig",
    "Resources",
    "CreateSandboxFromImageParams",
    "CreateSandboxFromSnapshotParams",
    "SessionExecuteRequest",
)


class DaytonaSandbox(RemoteSandbox):
    """The worker in a Daytona sandbox, one per run.

    Args:
        snapshot: The snapshot to start from (default: Daytona's default Python snapshot).
        image: A Docker image (or ``daytona.Image``) instead of a snapshot; needed for resources.
        cpu: CPU cores (with ``image``).
        memory_gb: Memory in GiB (with ``image``).
        disk_gb: Disk in GiB (with ``image``).
        target: Daytona region (default: ``DAYTONA_TARGET`` or the organization's default).
        api_url: Daytona API URL (default: ``DAYTONA_API_URL`` or Daytona's cloud).
        api_key: The Daytona key (default: the ``DAYTONA_API_KEY`` environment variable).
        create_timeout: Seconds to wait for the sandbox to start.
        client: An ``AsyncDaytona`` to use (tests pass a fake with the same shapes); not closed here.
        **options: What every remote sandbox takes: the limits, ``sandbox_timeout``, ``allow_internet_access``
            (see `RemoteSandbox`).
    """

    kind = "daytona"
    provider = "Daytona"
    credential = "DAYTONA_API_KEY"
    transport = "base64"
    scratch = "/tmp/rlm"

    def __init__(
        self,
        *,
        snapshot: str | None = None,
        image: Any = None,
        cpu: int | None = None,
        memory_gb: int | None = None,
        disk_gb: int | None = None,
        target: str | None = None,
        api_url: str | None = None,
        api_key: str | None = None,
        create_timeout: float = 120,
        client: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        if image is None and (cpu or memory_gb or disk_gb):
            raise ConfigurationError(
                "environment='daytona': cpu / memory_gb / disk_gb need an image (Daytona sizes snapshots when "
                "they are built); pass environment_kwargs={'image': 'python:3.12-slim', ...}"
            )
        if image is not None and snapshot is not None:
            raise ConfigurationError("environment='daytona': pass image or snapshot, not both")
        self.snapshot = snapshot
        self.image = image
        self.cpu = cpu
        self.memory_gb = memory_gb
        self.disk_gb = disk_gb
        self.target = target
        self.api_url = api_url
        self.api_key = api_key
        self.create_timeout = create_timeout
        self._client = client
        self._owns_client = client is None
        self.remote: Any = None
        self._sessions = 0

    def _describe(self) -> str:
        source = f"image {self.image!r}" if self.image is not None else f"snapshot {self.snapshot or 'default'}"
        return (
            f"{source}, cpu {self.cpu or 'default'}, memory {self.memory_gb or 'default'} GiB, "
            f"region {self.target or 'default'}"
        )

    def _sdk_parts(self) -> tuple[str, tuple[str, ...]]:
        # The SDK loads each of these on first access (seconds in all): in `start`'s worker thread, not here.
        return ("daytona", SDK_NAMES)

    async def _create_remote(self) -> None:
        daytona = require("daytona", extra="daytona", feature="the daytona sandbox")
        if self._client is None:
            key = self.api_key or os.environ.get("DAYTONA_API_KEY")
            if not key:
                raise self.missing_credential("or pass environment_kwargs={'api_key': ...}")
            self._client = daytona.AsyncDaytona(
                daytona.DaytonaConfig(api_key=key, api_url=self.api_url, target=self.target)
            )
        common: dict[str, Any] = {
            "name": f"rlm-{uuid.uuid4().hex[:12]}",
            "language": "python",
            "env_vars": {},
            "labels": {"rlm-adapters": "sandbox"},
            "network_block_all": not self.allow_internet_access,
            "ttl_minutes": max(1, math.ceil(self.sandbox_timeout / 60)),
        }
        params: Any
        if self.image is not None:
            resources = None
            if self.cpu or self.memory_gb or self.disk_gb:
                resources = daytona.Resources(cpu=self.cpu, memory=self.memory_gb, disk=self.disk_gb)
            params = daytona.CreateSandboxFromImageParams(image=self.image, resources=resources, **common)
        else:
            params = daytona.CreateSandboxFromSnapshotParams(snapshot=self.snapshot, **common)
        self.remote = await self._client.create(params, timeout=self.create_timeout)

    async def _run(self, argv: list[str]) -> RemoteProcess:
        daytona = require("daytona", extra="daytona", feature="the daytona sandbox")
        self._sessions += 1
        session_id = f"rlm-worker-{self._sessions}"
        await self.remote.process.create_session(session_id)
        # Daytona runs the command inside a script that records its exit code afterwards: no exec.
        request = daytona.SessionExecuteRequest(
            command=command_line(argv, self._env(), replace_shell=False), run_async=True, suppress_input_echo=True
        )
        response = await self.remote.process.execute_session_command(session_id, request)
        return DaytonaProcess(self.remote, session_id, response.cmd_id, shlex.join(self.kill_argv()))

    async def _destroy_remote(self) -> None:
        remote, client = self.remote, self._client
        self.remote = None
        try:
            if remote is not None:
                await remote.delete()
        finally:
            if client is not None and self._owns_client:
                self._client = None
                await client.close()
