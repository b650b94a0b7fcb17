"""The SDK fakes cannot drift from the installed SDKs, and refuse what the SDKs refuse.

Every method a fake offers is compared, parameter by parameter, with the real SDK's; the calls the
sandboxes make go through the real signatures and models (see `fakes`), checked here with calls
the SDKs would reject.
"""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

from tests.core.sandbox.cloud.fakes import (
    FakeAsyncDaytona,
    FakeDaytonaProcess,
    FakeDaytonaSandbox,
    FakeE2BCommands,
    FakeE2BFiles,
    FakeE2BHandle,
    FakeModal,
    FakePrimeClient,
    Service,
)


def _shape(function: Any) -> list[tuple[str, Any, Any]]:
    """Names, kinds and defaults of the parameters (annotations differ only in how they are spelled)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _pairs() -> list[tuple[Any, Any, str]]:
    from daytona._async.daytona import AsyncDaytona
    from daytona._async.process import AsyncProcess
    from daytona._async.sandbox import AsyncSandbox
    from e2b.sandbox_async.commands.command import Commands
    from e2b.sandbox_async.commands.command_handle import AsyncCommandHandle
    from e2b.sandbox_async.filesystem.filesystem import Filesystem
    from prime_sandboxes import AsyncSandboxClient

    prime = ["create", "wait_for_creation", "open_process", "execute_command", "delete", "aclose"]
    process = [
        "exec",
        "create_session",
        "execute_session_command",
        "get_session_command_logs_async",
        "send_session_command_input",
        "delete_session",
        "get_session_command",
    ]
    return (
        [(FakeE2BCommands, Commands, name) for name in ("run", "send_stdin")]
        + [(FakeE2BFiles, Filesystem, "write"), (FakeE2BHandle, AsyncCommandHandle, "kill")]
        + [(FakeE2BHandle, AsyncCommandHandle, "wait")]
        + [(FakePrimeClient, AsyncSandboxClient, name) for name in prime]
        + [(FakeDaytonaProcess, AsyncProcess, name) for name in process]
        + [(FakeAsyncDaytona, AsyncDaytona, name) for name in ("create", "delete", "close")]
        + [(FakeDaytonaSandbox, AsyncSandbox, "delete")]
    )


@pytest.mark.parametrize(("fake", "real", "name"), _pairs(), ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_fake_methods_have_the_sdk_signatures(fake: Any, real: Any, name: str) -> None:
    assert inspect.iscoroutinefunction(getattr(real, name)) == inspect.iscoroutinefunction(getattr(fake, name))
    assert _shape(getattr(fake, name)) == _shape(getattr(real, name))


def test_the_modal_names_the_sandbox_uses_exist_in_the_sdk() -> None:
    import modal
    from modal.container_process import _ContainerProcess
    from modal.io_streams import _StreamWriter
    from modal.sandbox._sandbox import _Sandbox

    for wrapped in (modal.Sandbox.create, modal.App.lookup, modal.Client.from_credentials):
        assert inspect.iscoroutinefunction(wrapped.aio)
    assert callable(modal.Image.from_registry)
    assert all(inspect.iscoroutinefunction(getattr(_Sandbox, n)) for n in ("exec", "terminate"))
    assert all(inspect.iscoroutinefunction(getattr(_ContainerProcess, n)) for n in ("wait", "poll"))
    assert inspect.iscoroutinefunction(_StreamWriter.drain) and not inspect.iscoroutinefunction(_StreamWriter.write)
    assert not hasattr(_ContainerProcess, "kill")  # why the modal sandbox kills its worker from a second exec
    assert "text" in inspect.signature(_Sandbox.exec).parameters


async def test_the_modal_fake_refuses_what_modal_refuses(tmp_path: Path) -> None:
    import modal

    fake = FakeModal(Service(tmp_path))
    app = await fake.App.lookup.aio("app", create_if_missing=True)
    with pytest.raises(TypeError):
        await fake.Sandbox.create.aio(app=app, block_network=True, no_such_option=1)
    with pytest.raises(ValueError, match="App is required"):
        await fake.Sandbox.create.aio(image=modal.Image.from_registry("python:3.12-slim"))
    with pytest.raises(TypeError, match=r"modal\.Image"):
        await fake.Sandbox.create.aio(app=app, image="python:3.12-slim")
    with pytest.raises(RuntimeError, match=r"\.aio"):
        fake.Sandbox.create(app=app)
    sandbox = await fake.Sandbox.create.aio(app=app)
    with pytest.raises(TypeError):
        await sandbox.exec.aio("true", text=False, stdin=True)  # exec has no stdin flag: stdin is always open
    process = await sandbox.exec.aio("cat", text=False)
    with pytest.raises(BufferError):
        process.stdin.write(b"x" * (16 * 1024 * 1024 + 1))  # the exec path buffers at most 16 MiB per drain
    await sandbox.terminate.aio()


async def test_the_prime_fake_refuses_what_prime_refuses(tmp_path: Path) -> None:
    from prime_sandboxes import CreateSandboxRequest
    from pydantic import ValidationError

    client = FakePrimeClient(Service(tmp_path))
    with pytest.raises(TypeError):
        await client.create({"name": "x", "docker_image": "python:3.12-slim"})
    # 0.4 says "docker_image\n  Field required", 0.5 "docker_image is required": the SDK's model refuses either way.
    with pytest.raises(ValidationError, match=r"docker_image(\s+Field| is) required"):
        CreateSandboxRequest(name="x")
    with pytest.raises(ValidationError):
        CreateSandboxRequest(name="x", docker_image="python:3.12-slim", network_allowlist=[], network_denylist=[])
    made = await client.create(CreateSandboxRequest(name="x", docker_image="python:3.12-slim"))
    with pytest.raises(ValueError, match="non-empty guest username"):
        await client.open_process(made.id, "true", user="")
    process = await client.open_process(made.id, "cat")
    await process.write_stdin(b"ping")
    assert await anext(aiter(process.stdout)) == b"ping"
    await process.kill()
    assert await process.wait() == -9
    with pytest.raises(BrokenPipeError):
        await process.write_stdin(b"late")
    await process.aclose()
    await client.delete(made.id)


async def test_the_daytona_fake_refuses_what_daytona_refuses(tmp_path: Path) -> None:
    from daytona import CreateSandboxFromImageParams, SessionExecuteRequest
    from pydantic import ValidationError

    daytona = FakeAsyncDaytona(Service(tmp_path))
    with pytest.raises(TypeError):
        await daytona.create({"image": "python:3.12-slim"})
    with pytest.raises(ValidationError):
        CreateSandboxFromImageParams(image="python:3.12-slim", network_block_all="yes please")
    with pytest.raises(ValidationError):
        SessionExecuteRequest(command=["python3", "-c", "1"])  # a string, not argv
    sandbox = await daytona.create(CreateSandboxFromImageParams(image="python:3.12-slim"))
    await sandbox.process.create_session("s")
    started = await sandbox.process.execute_session_command(
        "s", SessionExecuteRequest(command="cat", run_async=True, suppress_input_echo=True)
    )
    with pytest.raises(ValidationError):
        await sandbox.process.send_session_command_input("s", started.cmd_id, b"bytes are not accepted")  # type: ignore[arg-type]
    seen: list[str] = []
    arrived = asyncio.Event()

    def on_output(text: str) -> None:
        seen.append(text)
        arrived.set()

    follow = asyncio.create_task(
        sandbox.process.get_session_command_logs_async("s", started.cmd_id, on_output, on_output)
    )
    await sandbox.process.send_session_command_input("s", started.cmd_id, "text\n")
    await arrived.wait()
    await sandbox.process.delete_session("s")
    await follow
    assert "".join(seen) == "text\n"
    await sandbox.delete()
