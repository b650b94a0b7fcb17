"""The docker sandbox: the container's settings (against a fake client), and for real when an engine answers.

The real tests use the local test image built by .ci/setup_sandbox.sh (an empty image; the host's
Python is bound in read-only). Without an engine they are skipped with the reason.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.docker import DockerSandbox, client_address, engine_problem
from rlm_adapters.errors import SandboxError
from tests.sandbox_required import needs_sandbox

IMAGE = os.environ.get("RLM_DOCKER_TEST_IMAGE", "rlm-sandbox-test:latest")
PREFIX = str(Path(sys.executable).resolve().parent.parent)
LOCAL_IMAGE = {"image": IMAGE, "python": str(Path(sys.executable).resolve()),
               "read_only_binds": {"/usr": "/usr", PREFIX: PREFIX}}  # fmt: skip
PROBLEM = engine_problem(IMAGE)
needs_engine = needs_sandbox(PROBLEM and f"no usable Docker engine: {PROBLEM}")


async def _handler(kind: str, args: dict[str, Any]) -> str:
    return f"host:{args.get('prompt')}"


def _setup(tmp_path: Path, text: str = "ctx") -> SandboxSetup:
    return SandboxSetup(validate_context(text), _handler, scratch=tmp_path)


class FakeContainer:
    id = "f" * 64

    def __init__(self) -> None:
        self.removed = False
        self.started = False

    def start(self) -> None:
        self.started = True

    def remove(self, force: bool = False) -> None:
        self.removed = force


class FakeContainers:
    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}
        self.made = FakeContainer()

    def create(self, image: str, **kwargs: Any) -> FakeContainer:
        self.kwargs = {"image": image, **kwargs}
        return self.made


class FakeApi:
    def exec_create(self, *args: Any, **kwargs: Any) -> dict[str, str]:
        raise RuntimeError("engine said no")


class FakeClient:
    def __init__(self) -> None:
        self.containers = FakeContainers()
        self.api = FakeApi()


async def test_container_is_locked_down_and_removed_on_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-only")
    client = FakeClient()
    sandbox = DockerSandbox(client=client, memory_limit="1GiB", process_limit=50)
    with pytest.raises(SandboxError, match="engine said no"):
        await sandbox.start(_setup(tmp_path))
    made = client.containers.kwargs
    assert made["image"] == "python:3.12-slim"
    assert made["network_mode"] == "none" and made["read_only"] is True
    assert made["mem_limit"] == 1024**3 and made["pids_limit"] == 50
    assert made["user"] == "65534:65534" and made["cap_drop"] == ["ALL"]
    assert list(made["tmpfs"]) == ["/scratch"] and made["volumes"] == {}
    assert "sk-host-only" not in str(made["environment"]) and set(made["environment"]) >= {"PATH", "HOME"}
    assert client.containers.made.removed  # one container per run, removed even on error


def test_docker_host_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://engine.invalid:2375")
    assert client_address() == "tcp://engine.invalid:2375"
    assert "tcp://engine.invalid:2375" in DockerSandbox().isolation


@needs_engine
async def test_real_container_runs_cells_without_host_access(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-only")
    sandbox = DockerSandbox(**LOCAL_IMAGE, memory_limit="512MiB", process_limit=64)
    await sandbox.start(_setup(tmp_path, "the context"))
    container_id = sandbox.container.id
    try:
        result = await sandbox.execute(
            "import os, socket\nprint(context, llm_query('q'), os.getuid(), socket.if_nameindex())\n"
            "print(os.environ.get('OPENAI_API_KEY'))\n_ = open('note.txt', 'w').write('scratch is writable')",
            None,
        )
        assert result.error is None
        assert result.output == "the context host:q 65534 [(1, 'lo')]\nNone\n"
        denied = await sandbox.execute("open('/usr/rlm-escape', 'w')", None)
        assert "Read-only file system" in (denied.error or "")
        killed = await sandbox.execute("import os\nos._exit(3)", None)
        assert killed.variables_lost and "exited with code 3" in (killed.error or "")
        assert (await sandbox.execute("print(open('note.txt').read())", None)).output == "scratch is writable\n"
    finally:
        await sandbox.aclose()
    import docker

    client = docker.from_env()
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(container_id)
    client.close()


@needs_engine
async def test_a_cell_silent_for_longer_than_the_clients_timeout_is_not_a_dead_worker(tmp_path: Path) -> None:
    """The SDK leaves its request timeout (60 s by default, under the default cell_timeout) on the exec's socket."""
    import docker

    client = docker.from_env(timeout=1)
    sandbox = DockerSandbox(**LOCAL_IMAGE, client=client)
    await sandbox.start(_setup(tmp_path))
    try:
        result = await sandbox.execute("import time\ntime.sleep(2.5)\nprint('still here')", None)
        assert (result.output, result.error, result.variables_lost) == ("still here\n", None, False)
    finally:
        await sandbox.aclose()
        client.close()


@needs_engine
async def test_a_restart_closes_the_old_workers_connection_at_once(tmp_path: Path) -> None:
    """Not when a garbage collection finds the SDK's socket file: until then the engine fed the old exec."""
    sandbox = DockerSandbox(**LOCAL_IMAGE, cell_timeout=1.0)
    await sandbox.start(_setup(tmp_path))
    try:
        old_sock, old_reader = sandbox._sock, sandbox._demux
        assert old_reader is not None
        # Swallows the interrupt past cell_timeout, so the worker is killed and a new one started.
        stubborn = "import time\nwhile True:\n    try:\n        time.sleep(30)\n    except BaseException:\n        pass"
        timed_out = await sandbox.execute(stubborn, None)
        assert timed_out.timed_out and timed_out.variables_lost
        assert old_sock.fileno() == -1  # the connection itself is closed, not only this handle on it
        old_reader._thread.join(10)
        assert not old_reader._thread.is_alive()
        assert (await sandbox.execute("print('fresh')", None)).output == "fresh\n"
    finally:
        await sandbox.aclose()


class FreezeUnderLoad:
    """A container whose cgroup freeze fails `failures` times, as runc's does when it times out on a busy host."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.pauses = 0

    def pause(self) -> None:
        self.pauses += 1
        if self.pauses <= self.failures:
            raise RuntimeError("500 Server Error: OCI runtime pause failed: unable to freeze: unknown")


def test_a_freeze_that_times_out_once_is_tried_again_and_the_container_rests() -> None:
    sandbox = DockerSandbox(client=object())
    sandbox.container = container = FreezeUnderLoad(failures=1)
    assert sandbox._pause_container() is True
    assert (container.pauses, sandbox._can_pause) == (2, True)


def test_an_engine_that_cannot_freeze_is_said_once_and_the_sandbox_runs_on(caplog: pytest.LogCaptureFixture) -> None:
    sandbox = DockerSandbox(client=object())
    sandbox.container = container = FreezeUnderLoad(failures=10**6)
    assert sandbox._pause_container() is False
    assert (container.pauses, sandbox._can_pause) == (3, False)
    assert len([r for r in caplog.records if "cannot pause the container" in r.getMessage()]) == 1
