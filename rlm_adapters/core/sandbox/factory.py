"""Sandbox kinds by name. Docker and the cloud sandboxes are imported only when asked for."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Mapping
from typing import Any

from rlm_adapters._extras import is_loaded
from rlm_adapters.core.sandbox.base import BlockingSetup, Sandbox
from rlm_adapters.errors import ConfigurationError

_KINDS: dict[str, str] = {
    "local": "rlm_adapters.core.sandbox.local:LocalSandbox",
    "subprocess": "rlm_adapters.core.sandbox.subprocess.sandbox:SubprocessSandbox",
    "docker": "rlm_adapters.core.sandbox.docker:DockerSandbox",
    "e2b": "rlm_adapters.core.sandbox.cloud.e2b:E2BSandbox",
    "modal": "rlm_adapters.core.sandbox.cloud.modal:ModalSandbox",
    "prime": "rlm_adapters.core.sandbox.cloud.prime:PrimeSandbox",
    "daytona": "rlm_adapters.core.sandbox.cloud.daytona:DaytonaSandbox",
}


def sandbox_kinds() -> list[str]:
    """Every `environment=` name."""
    return list(_KINDS)


def check_kind(kind: str) -> None:
    """Raise `ConfigurationError` for an unknown sandbox kind."""
    if kind not in _KINDS:
        raise ConfigurationError(f"unknown environment {kind!r}; use one of {sandbox_kinds()}")


def unset_credential(kind: str, environ: Mapping[str, str]) -> str | None:
    """The environment variable a cloud sandbox of `kind` needs and `environ` lacks (None: nothing missing),
    as the sandbox's class declares it (its module is imported; the provider's SDK is not)."""
    check_kind(kind)
    from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox

    cls = _sandbox_class(kind)
    return cls.unset_credential(environ) if issubclass(cls, RemoteSandbox) else None


def _sandbox_class(kind: str) -> type:
    module_name, _, attribute = _KINDS[kind].partition(":")
    cls: type = getattr(importlib.import_module(module_name), attribute)
    return cls


def make_sandbox(kind: str, options: dict[str, Any] | None = None) -> Sandbox:
    """A new, unstarted sandbox of `kind` configured with `environment_kwargs`."""
    check_kind(kind)
    cls = _sandbox_class(kind)
    try:
        sandbox: Sandbox = cls(**(options or {}))
    except TypeError as exc:
        raise ConfigurationError(f"bad environment_kwargs for environment={kind!r}: {exc}") from exc
    return sandbox


async def open_sandbox(kind: str, options: dict[str, Any] | None = None) -> Sandbox:
    """`make_sandbox` for async code: what would hold the event loop runs in a worker thread, and only once.

    That is the sandbox's module on its first use and the sandbox's `BlockingSetup` (the subprocess
    sandbox's isolation probe); a provider's SDK is loaded the same way by the sandbox's `start`. Later runs
    make their sandbox on the loop, with no thread hop (a burst of nested runs would queue behind others).
    """
    check_kind(kind)
    if is_loaded(_KINDS[kind].partition(":")[0]):
        sandbox = make_sandbox(kind, options)
    else:
        sandbox = await asyncio.to_thread(make_sandbox, kind, options)
    if isinstance(sandbox, BlockingSetup) and (work := sandbox.blocking_setup()) is not None:
        await asyncio.to_thread(work)
    return sandbox
