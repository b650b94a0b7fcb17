"""The ``prime`` sandbox: the same worker program in a Prime Intellect sandbox (``prime-sandboxes`` SDK).

One sandbox per run (image, CPU cores, memory, disk and lifetime from ``environment_kwargs``; an empty
egress allowlist unless internet access is asked for); the worker runs as a live process
(``AsyncSandboxClient.open_process``) whose stdin / stdout carry the frames as bytes. The context is
streamed over that stdin once (see `shipping`). The key comes from ``PRIME_API_KEY`` (or ``api_key=``).
"""

from __future__ import annotations

import math
import os
import shlex
import uuid
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from rlm_adapters.core.sandbox.cloud.transport import RemoteProcess, command_line


class PrimeProcess(RemoteProcess):
    """An ``AsyncSandboxProcess`` with its stdout pumped into the channel's reader."""

    def __init__(self, handle: Any, client: Any, sandbox_id: str, kill_command: str) -> None:
        super().__init__("raw")
        self.handle = handle
        self._client = client
        self._sandbox_id = sandbox_id
        self.kill_command = kill_command
        self.follow(handle.stdout, stdout=True)
        self.follow(handle.stderr, stdout=False)

    async def send(self, data: bytes) -> None:
        await self.handle.write_stdin(data)

    async def kill(self) -> None:
        # The process itself, then its group: what the worker started goes too.
        try:
            await self.handle.kill()
        finally:
            await self._client.execute_command(self._sandbox_id, self.kill_command, timeout=30)

    async def release(self) -> None:
        try:
            await self.handle.aclose()  # waits briefly for the exit event, then releases the stream's transport
        finally:
            await super().release()

    async def exit_code(self) -> int | None:
        code: int = await self.handle.wait()
        return code


class PrimeSandbox(RemoteSandbox):
    """The worker in a Prime Intellect sandbox, one per run.

    Args:
        image: The Docker image (needs ``python3``).
        cpu_cores: CPU cores.
        memory_gb: Memory in GB.
        disk_size_gb: Disk in GB.
        region: Region to run in (default: Prime's choice).
        team_id: Team to bill (default: the key's).
        api_key: The Prime key (default: the ``PRIME_API_KEY`` environment variable).
        client: An ``AsyncSandboxClient`` to use (tests pass a fake with the same shapes); not closed here.
        **options: What every remote sandbox takes: the limits, ``sandbox_timeout``, ``allow_internet_access``
            (see `RemoteSandbox`).
    """

    kind = "prime"
    provider = "Prime Intellect"
    credential = "PRIME_API_KEY"
    transport = "raw"
    scratch = "/tmp/rlm"

    def __init__(
        self,
        *,
        image: str = "python:3.12-slim",
        cpu_cores: float = 1.0,
        memory_gb: float = 2.0,
        disk_size_gb: float = 5.0,
        region: str | None = None,
        team_id: str | None = None,
        api_key: str | None = None,
        client: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.image = image
        self.cpu_cores = cpu_cores
        self.memory_gb = memory_gb
        self.disk_size_gb = disk_size_gb
        self.region = region
        self.team_id = team_id
        self.api_key = api_key
        self._client = client
        self._owns_client = client is None
        self.sandbox_id: str | None = None

    def _describe(self) -> str:
        return (
            f"image {self.image!r}, {self.cpu_cores:g} CPU, {self.memory_gb:g} GB memory, {self.disk_size_gb:g} GB "
            f"disk, region {self.region or 'any'}"
        )

    def _sdk_parts(self) -> tuple[str, tuple[str, ...]]:
        return ("prime_sandboxes", ("AsyncSandboxClient", "CreateSandboxRequest"))

    async def _create_remote(self) -> None:
        prime = require("prime_sandboxes", extra="prime", feature="the prime sandbox")
        key = self.api_key or os.environ.get("PRIME_API_KEY")
        if self._client is None:
            if not key:
                raise self.missing_credential("or pass environment_kwargs={'api_key': ...}")
            self._client = prime.AsyncSandboxClient(api_key=key)
        request = prime.CreateSandboxRequest(
            name=f"rlm-{uuid.uuid4().hex[:12]}",
            docker_image=self.image,
            cpu_cores=self.cpu_cores,
            memory_gb=self.memory_gb,
            disk_size_gb=self.disk_size_gb,
            timeout_minutes=max(1, math.ceil(self.sandbox_timeout / 60)),
            network_allowlist=None if self.allow_internet_access else [],
            environment_vars={},
            labels=["rlm-adapters"],
            region=self.region,
            team_id=self.team_id,
        )
        created = await self._client.create(request)
        self.sandbox_id = created.id
        await self._client.wait_for_creation(created.id)

    async def _run(self, argv: list[str]) -> RemoteProcess:
        assert self.sandbox_id is not None
        handle = await self._client.open_process(self.sandbox_id, command_line(argv, self._env()), env=self._env())
        return PrimeProcess(handle, self._client, self.sandbox_id, shlex.join(self.kill_argv()))

    async def _destroy_remote(self) -> None:
        client, sandbox_id = self._client, self.sandbox_id
        self.sandbox_id = None
        try:
            if client is not None and sandbox_id is not None:
                await client.delete(sandbox_id)
        finally:
            if client is not None and self._owns_client:
                self._client = None
                await client.aclose()
