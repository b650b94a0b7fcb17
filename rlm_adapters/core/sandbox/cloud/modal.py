"""The ``modal`` sandbox: the same worker program in a Modal Sandbox.

One Modal Sandbox per run (``block_network=True`` unless asked otherwise, the image, CPU, memory and
region from ``environment_kwargs``); the worker runs as an ``exec`` whose stdin / stdout carry the frames
as bytes (``text=False``). The context is streamed over that stdin once (see `shipping`). Credentials are
Modal's own: ``MODAL_TOKEN_ID`` / ``MODAL_TOKEN_SECRET``, a ``modal token new`` profile, or
``token_id=`` / ``token_secret=``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from rlm_adapters.core.sandbox.cloud.transport import RemoteProcess


class ModalProcess(RemoteProcess):
    """A Modal ``ContainerProcess`` (bytes mode) with its stdout pumped into the channel's reader."""

    def __init__(self, sandbox: ModalSandbox, handle: Any) -> None:
        super().__init__("raw")
        self._sandbox = sandbox
        self.handle = handle
        self.follow(handle.stdout, stdout=True)
        self.follow(handle.stderr, stdout=False)

    async def send(self, data: bytes) -> None:
        self.handle.stdin.write(data)
        await self.handle.stdin.drain.aio()

    async def kill(self) -> None:
        # A ContainerProcess has no kill: end the worker's process group from a second exec.
        remote = self._sandbox.remote
        if remote is not None:
            killer = await remote.exec.aio(*self._sandbox.kill_argv(), text=False, timeout=30)
            await killer.wait.aio()

    async def exit_code(self) -> int | None:
        code: int = await self.handle.wait.aio()  # the end of output can come before the exit is known
        return code


class ModalSandbox(RemoteSandbox):
    """The worker in a Modal Sandbox, one per run.

    Args:
        image: A registry image with ``python3`` (or a ready ``modal.Image``).
        app_name: The Modal app the sandboxes are grouped under (created if missing).
        cpu: CPU cores to request (Modal's ``cpu``).
        memory_mb: Memory to request in MiB (Modal's ``memory``).
        region: Region(s) to run in.
        gpu: A GPU to attach (e.g. ``"T4"``), for model code that needs one.
        token_id: Modal token id (default: ``MODAL_TOKEN_ID`` or the active profile).
        token_secret: Modal token secret (default: ``MODAL_TOKEN_SECRET`` or the active profile).
        sdk: The ``modal`` module to use (tests pass a fake with the same shapes).
        **options: What every remote sandbox takes: the limits, ``sandbox_timeout``, ``allow_internet_access``
            (see `RemoteSandbox`).
    """

    kind = "modal"
    provider = "Modal"
    credential = "MODAL_TOKEN_ID"
    transport = "raw"
    scratch = "/tmp/rlm"

    def __init__(
        self,
        *,
        image: Any = "python:3.12-slim",
        app_name: str = "rlm-adapters",
        cpu: float | None = None,
        memory_mb: int | None = None,
        region: str | list[str] | None = None,
        gpu: str | None = None,
        token_id: str | None = None,
        token_secret: str | None = None,
        sdk: Any = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.image = image
        self.app_name = app_name
        self.cpu = cpu
        self.memory_mb = memory_mb
        self.region = region
        self.gpu = gpu
        self.token_id = token_id
        self.token_secret = token_secret
        self._sdk = sdk
        self.remote: Any = None

    def _describe(self) -> str:
        return (
            f"image {self.image if isinstance(self.image, str) else type(self.image).__name__}, app "
            f"{self.app_name!r}, cpu {self.cpu or 'default'}, memory {self.memory_mb or 'default'} MiB, "
            f"region {self.region or 'any'}"
        )

    @classmethod
    def unset_credential(cls, environ: Mapping[str, str]) -> str | None:
        """``MODAL_TOKEN_ID``, unless it is set or a ``modal token new`` profile exists."""
        profile = Path(environ.get("MODAL_CONFIG_PATH") or Path.home() / ".modal.toml")
        return None if profile.exists() else super().unset_credential(environ)

    def _has_credentials(self, modal: Any) -> bool:
        if self.token_id or os.environ.get("MODAL_TOKEN_ID"):
            return True
        config = getattr(getattr(modal, "config", None), "config", None)
        return bool(config is not None and config.get("token_id"))

    def _sdk_parts(self) -> tuple[str, tuple[str, ...]] | None:
        return None if self._sdk is not None else ("modal", ("App", "Client", "Image", "Sandbox"))

    async def _create_remote(self) -> None:
        modal = self._sdk or require("modal", extra="modal", feature="the modal sandbox")
        if not self._has_credentials(modal):
            raise self.missing_credential(
                "and MODAL_TOKEN_SECRET; or run `modal token new`; or pass environment_kwargs={'token_id': ..., "
                "'token_secret': ...}"
            )
        if bool(self.token_id) != bool(self.token_secret):
            raise self.missing_credential("pass both token_id and token_secret, or neither")
        client = None
        if self.token_id and self.token_secret:
            client = await modal.Client.from_credentials.aio(self.token_id, self.token_secret)
        app = await modal.App.lookup.aio(self.app_name, client=client, create_if_missing=True)
        image = modal.Image.from_registry(self.image) if isinstance(self.image, str) else self.image
        self.remote = await modal.Sandbox.create.aio(
            app=app,
            image=image,
            env={},
            timeout=self.sandbox_timeout,
            cpu=self.cpu,
            memory=self.memory_mb,
            gpu=self.gpu,
            region=self.region,
            block_network=not self.allow_internet_access,
            client=client,
        )

    async def _run(self, argv: list[str]) -> RemoteProcess:
        handle = await self.remote.exec.aio(*argv, env=self._env(), text=False)
        return ModalProcess(self, handle)

    async def _destroy_remote(self) -> None:
        remote, self.remote = self.remote, None
        if remote is not None:
            await remote.terminate.aio()
