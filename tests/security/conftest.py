"""Fixtures for the break-out suite: host-side canaries the attacks try to reach, and sandboxes to attack."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.budget import BudgetExhausted
from rlm_adapters.core.sandbox.base import Sandbox, SandboxSetup
from rlm_adapters.core.sandbox.local import LocalSandbox
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox
from tests.sandbox.sandbox_helpers import descendants
from tests.security.attacks import SUB_CALL_BUDGET, HostCanaries

# Small limits so each attack is stopped in about a second.
SUBPROCESS_LIMITS: dict[str, Any] = {
    "memory_limit": "512MiB",
    "cpu_time_limit": 1.0,
    "cell_timeout": 20.0,  # generous: the machine may be loaded; attacks that aim at it pass their own
    "process_limit": 64,
    "file_size_limit": "8MiB",
    "capture_chars": 10_000,
}


@pytest.fixture
def canaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostCanaries]:
    """Secrets in the host's environment and files, a listening port, and a signal trap."""
    secret = f"sk-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("RLM_TEST_SECRET", secret)
    canary_file = tmp_path / "host_secret.txt"
    canary_text = f"canary-file-{uuid.uuid4().hex}"
    canary_file.write_text(canary_text)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    context_file = scratch / "context.txt"
    context_file.write_text("the original context")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.setblocking(False)
    home = sorted(e for e in os.listdir(Path.home()) if e not in (".pyenv", ".", ".."))
    interfaces = [name for _, name in socket.if_nameindex() if name != "lo"]
    found = HostCanaries(
        secret=secret,
        canary_file=canary_file,
        canary_text=canary_text,
        escape_target=tmp_path / "escaped.txt",
        runtime_target=Path(f"/usr/lib/rlm-escape-{uuid.uuid4().hex[:8]}"),
        context_file=context_file,
        server=server,
        port=server.getsockname()[1],
        host_pid=os.getpid(),
        home_entry=home[0] if home else None,
        host_interfaces=interfaces,
    )
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: found.signals.append(signum))
    yield found
    signal.signal(signal.SIGUSR2, previous)
    server.close()
    found.runtime_target.unlink(missing_ok=True)


def budget_handler(canaries: HostCanaries) -> Any:
    """A host call handler with a budget of `SUB_CALL_BUDGET` calls, as the broker enforces it."""

    async def handle(kind: str, args: dict[str, Any]) -> Any:
        if canaries.approved_calls >= SUB_CALL_BUDGET:
            raise BudgetExhausted("sub_calls", f"the run's budget of {SUB_CALL_BUDGET} sub-calls is spent")
        canaries.approved_calls += 1
        return f"answer to {kind}"

    return handle


async def start_sandbox(kind: str, canaries: HostCanaries) -> Sandbox:
    """A started sandbox of `kind` over the canaries' context file."""
    sandbox: Sandbox
    if kind == "local":
        sandbox = LocalSandbox(cell_timeout=5.0, capture_chars=10_000)
    elif kind == "subprocess":
        sandbox = SubprocessSandbox(**SUBPROCESS_LIMITS)
    else:
        from rlm_adapters.core.sandbox.docker import DockerSandbox

        sandbox = DockerSandbox(**DOCKER_OPTIONS)
    await sandbox.start(
        SandboxSetup(
            context="the original context",
            context_file=canaries.context_file,
            context_format="text",
            handler=budget_handler(canaries),
            scratch=canaries.context_file.parent,
        )
    )
    return sandbox


# The local test image (.ci/setup_sandbox.sh) is empty: the host's Python is bound in read-only.
_PREFIX = str(Path(sys.executable).resolve().parent.parent)
DOCKER_OPTIONS: dict[str, Any] = {
    "image": os.environ.get("RLM_DOCKER_TEST_IMAGE", "rlm-sandbox-test:latest"),
    "python": str(Path(sys.executable).resolve()),
    "read_only_binds": {"/usr": "/usr", _PREFIX: _PREFIX},
    "memory_limit": "512MiB",
    "cpu_time_limit": 1.0,
    "cell_timeout": 20.0,
    "process_limit": 64,
    "file_size_limit": "8MiB",
    "capture_chars": 10_000,
}


def docker_skip_reason() -> str | None:
    """Why the docker suite cannot run here, or None when an engine and the test image answer."""
    try:
        from rlm_adapters.core.sandbox.docker import engine_problem
    except ImportError as exc:
        return f"docker sandbox unavailable: {exc}"
    return engine_problem(os.environ.get("RLM_DOCKER_TEST_IMAGE", "rlm-sandbox-test:latest"))


@pytest.fixture
async def attacked(request: pytest.FixtureRequest, canaries: HostCanaries) -> AsyncIterator[Sandbox]:
    """The sandbox under attack; after the test it is closed and must leave no process behind."""
    kind = request.param
    if kind == "docker" and (reason := docker_skip_reason()):
        pytest.skip(reason)
    before = set(descendants())
    sandbox = await start_sandbox(kind, canaries)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()
    assert set(descendants()) - before == set(), "closing the sandbox left a process behind"
    if isinstance(sandbox, SubprocessSandbox):
        assert sandbox._cgroup is None


@pytest.fixture
def cleanup_runtime_target(canaries: HostCanaries) -> Iterator[None]:
    """Remove a file an escaping attack may have written into the runtime."""
    yield
    if canaries.runtime_target.exists():
        canaries.runtime_target.unlink()
    shutil.rmtree(canaries.escape_target, ignore_errors=True)
