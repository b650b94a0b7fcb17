"""The ``e2b`` sandbox: the same worker program in an E2B cloud sandbox.

One sandbox per run (the template, a lifetime, no internet access unless asked for). The context is
uploaded with E2B's file API; the bootstrap program (see `shipping`) runs as a background command whose
stdin carries the worker's source and then the host's frames as raw bytes. E2B hands a command's stdout
back as text, which would mangle binary frame headers, so the bootstrap re-encodes the worker's protocol
output as base64 lines (the ``base64-out`` transport) that the host decodes. Sub-calls are answered on
the host (keys and budget never leave it). The key comes from ``E2B_API_KEY`` (or ``api_key=``).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.sandbox.channel import WorkerGone
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from rlm_adapters.core.sandbox.cloud.transport import RemoteProcess, command_line

SandboxFactory = Callable[..., Awaitable[Any]]


class E2BProcess(RemoteProcess):
    """A background command (``AsyncCommandHandle``) whose stdout the SDK hands to `feed_stdout` as text."""

    def __init__(self, remote: Any) -> None:
        super().__init__("base64-out")
        self.remote = remote
        self.handle: Any = None

    def watch(self, handle: Any) -> None:
        """Hold `handle` and end the output when the command ends (its last output was delivered before)."""
        self.handle = handle

        async def ended() -> None:
            try:
                await handle.wait()
            except Exception:  # CommandExitException: a non-zero exit is still an end
                pass
            finally:
                self.end_of_output()

        self.own(ended())

    async def send(self, data: bytes) -> None:
        await self.remote.commands.send_stdin(self.handle.pid, data)

    async def kill(self) -> None:
        await self.handle.kill()

    async def exit_code(self) -> int | None:
        code = self.handle.exit_code  # None while it runs; its `wait` raises on a non-zero exit instead
        return code if isinstance(code, int) else None


class E2BSandbox(RemoteSandbox):
    """The worker in an E2B sandbox, one per run.

    Args:
        template: The E2B template (default: E2B's base template, which has ``python3``).
        api_key: The E2B key (default: the ``E2B_API_KEY`` environment variable).
        sandbox_factory: Creates the sandbox with ``e2b.AsyncSandbox.create``'s keywords (default: that, with
            the key); tests pass a fake.
        **options: What every remote sandbox takes: the limits, ``sandbox_timeout``, ``allow_internet_access``
            (see `RemoteSandbox`).
    """

    kind = "e2b"
    provider = "E2B"
    credential = "E2B_API_KEY"
    transport = "base64-out"
    scratch = "/home/user/rlm"
    # Unlike Docker and the other cloud sandboxes, an OSError here is not taken for a dead worker.
    _gone = (WorkerGone,)

    def __init__(
        self,
        *,
        template: str | None = None,
        api_key: str | None = None,
        sandbox_factory: SandboxFactory | None = None,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.template = template
        self.api_key = api_key
        self._factory = sandbox_factory
        self.remote: Any = None

    def _describe(self) -> str:
        return f"template {self.template or 'base'}"

    def _sdk_parts(self) -> tuple[str, tuple[str, ...]] | None:
        return None if self._factory is not None else ("e2b", ("AsyncSandbox",))

    async def _create_remote(self) -> None:
        options: dict[str, Any] = {
            "template": self.template,
            "timeout": self.sandbox_timeout,
            "envs": {},
            "allow_internet_access": self.allow_internet_access,
        }
        if self._factory is not None:
            self.remote = await self._factory(**options)
            return
        key = self.api_key or os.environ.get("E2B_API_KEY")
        if not key:
            raise self.missing_credential("or pass environment_kwargs={'api_key': ...}")
        e2b = require("e2b", extra="e2b", feature="the e2b sandbox")
        self.remote = await e2b.AsyncSandbox.create(api_key=key, **options)

    async def _upload(self, context_file: Path) -> bool:
        with context_file.open("rb") as handle:
            await self.remote.files.write(f"{self.scratch}/{context_file.name}", handle)
        return True

    async def _run(self, argv: list[str]) -> RemoteProcess:
        process = E2BProcess(self.remote)
        # A shell string: `env -i` keeps the template's environment from the worker, as the other shells do.
        handle = await self.remote.commands.run(
            command_line(argv, self._env()),
            background=True,
            stdin=True,
            envs={},
            on_stdout=process.feed_stdout,
            on_stderr=process.feed_stderr,
            timeout=0,
        )
        process.watch(handle)
        return process

    async def _destroy_remote(self) -> None:
        remote, self.remote = self.remote, None
        if remote is not None:
            await remote.kill()
