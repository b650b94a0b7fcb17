"""The modal, prime and daytona sandboxes against in-process fakes of their SDKs (see `remote_fakes`).

Each fake runs the real bootstrap and worker as local processes, so the frames, the context streamed over
stdin, restarts and teardown are exercised end to end; the same fault suite the subprocess and docker
sandboxes run is run here where a fake can host it (the provider's own walls, its file system and network,
cannot be: those are the provider's).
"""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.context import validate_context
from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.cloud.daytona import DaytonaSandbox
from rlm_adapters.core.sandbox.cloud.modal import ModalSandbox
from rlm_adapters.core.sandbox.cloud.prime import PrimeSandbox
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from rlm_adapters.core.sandbox.factory import make_sandbox
from rlm_adapters.core.sandbox.shipping import CHUNK
from rlm_adapters.errors import ConfigurationError, SandboxError
from rlm_adapters.testing import by_turn, turn_of
from tests.core.sandbox.cloud.fakes import FakeAsyncDaytona, FakeE2B, FakeModal, FakePrimeClient, Remote, Service
from tests.core.sandbox.helpers import ProcessWatch

KINDS = ["e2b", "modal", "prime", "daytona"]
# The attack suites (`test_breakout.py`, `test_floods.py`) run on e2b in the developer's pass and on every
# provider in `pytest -m slow` (CI runs both): what they attack is the remote worker, the same for all four.
ATTACKED = [pytest.param(k, marks=[] if k == "e2b" else [pytest.mark.slow], id=k) for k in KINDS]


@dataclass
class Harness:
    kind: str
    service: Service
    options: dict[str, Any]
    fake: Any

    def make(self, **options: Any) -> RemoteSandbox:
        sandbox = make_sandbox(self.kind, {**self.options, **options})
        assert isinstance(sandbox, RemoteSandbox)
        return sandbox

    def remote(self, index: int = -1) -> Remote:
        return self.service.remotes[index]


@pytest.fixture(params=KINDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    service = Service(tmp_path / "provider")
    kind: str = request.param
    fake: Any
    if kind == "e2b":
        fake = FakeE2B(service)
        options: dict[str, Any] = {"sandbox_factory": fake.create}
    elif kind == "modal":
        monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
        monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
        fake = FakeModal(service)
        options = {"sdk": fake}
    elif kind == "prime":
        fake = FakePrimeClient(service)
        options = {"client": fake}
    else:
        fake = FakeAsyncDaytona(service)
        options = {"client": fake}
    return Harness(kind, service, options, fake)


async def _echo(kind: str, args: dict[str, Any]) -> str:
    return f"host answered {kind}({args.get('prompt')})"


def _setup(tmp_path: Path, text: str = "the context " * 1000) -> SandboxSetup:
    return SandboxSetup(validate_context(text), _echo, scratch=tmp_path)


async def _started(harness: Harness, tmp_path: Path, **options: Any) -> RemoteSandbox:
    sandbox = harness.make(**options)
    await sandbox.start(_setup(tmp_path))
    return sandbox


def _worker_pid(harness: Harness) -> int:
    return int((harness.remote().root / "worker.pid").read_text())


async def test_cells_subcalls_and_context_over_the_fake_sdk(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-only")
    watch = ProcessWatch()
    sandbox = await _started(harness, tmp_path)
    remote = harness.remote()
    try:
        assert (remote.root / "context.txt").read_text() == "the context " * 1000
        result = await sandbox.execute("x = len(context)\nprint(x, llm_query('hi'))", None)
        assert result.error is None
        assert result.output == "12000 host answered llm_query(hi)\n"
        big = await sandbox.execute("print('é' * 50_000)", None)  # many frames' worth, split mid-way
        assert big.output == "é" * 50_000 + "\n"
        env = await sandbox.execute("import os\nprint(sorted(os.environ), os.environ.get('OPENAI_API_KEY'))", None)
        names = "['HOME', 'LANG', 'PATH', 'PYTHONDONTWRITEBYTECODE', 'PYTHONUNBUFFERED', 'TMPDIR']"
        assert env.output == f"{names} None\n"  # the one worker environment: nothing of the host's
        assert (await sandbox.execute("print(x)", None)).output == "12000\n"
        assert sandbox.starts == 1
        assert harness.kind in sandbox.isolation and "no internet access" in sandbox.isolation
    finally:
        await sandbox.aclose()
    assert remote.destroyed and harness.service.live() == []
    assert watch.new() == set()


async def test_the_sandbox_is_asked_for_no_network_and_no_host_environment(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-only")
    sandbox = await _started(harness, tmp_path, sandbox_timeout=600)
    await sandbox.aclose()
    if harness.kind == "e2b":
        made = harness.fake.created[0]
        assert made["allow_internet_access"] is False and made["envs"] == {} and made["timeout"] == 600
        run = harness.fake.sandboxes[0].commands.runs[0]
        assert run["envs"] == {} and run["cmd"].startswith("exec env -i ")  # none of the template's environment
    elif harness.kind == "modal":
        made = harness.fake.created[0]
        assert made["block_network"] is True and made["env"] == {} and made["timeout"] == 600
        assert made["image"] is not None and made["app"].name == "rlm-adapters"
    elif harness.kind == "prime":
        request = harness.fake.requests[0]
        assert request.network_allowlist == [] and request.environment_vars == {} and request.timeout_minutes == 10
        assert harness.fake.deleted == [harness.remote().id] and not harness.fake.closed  # a passed client stays open
    else:
        params = harness.fake.sandboxes[0].params
        assert params.network_block_all is True and params.env_vars == {} and params.ttl_minutes == 10
        assert harness.fake.sandboxes[0].process.requests[0].suppress_input_echo is True
    assert "sk-host-only" not in repr(harness.service.calls)


async def test_a_large_context_is_streamed_in_chunks(harness: Harness, tmp_path: Path) -> None:
    text = "0123456789abcdef" * (3 * CHUNK // 16 + 5)  # a little over 3 chunks
    sandbox = harness.make()
    await sandbox.start(_setup(tmp_path, text))
    try:
        assert (harness.remote().root / "context.txt").read_text() == text
        assert (await sandbox.execute("print(len(context))", None)).output == f"{len(text)}\n"
    finally:
        await sandbox.aclose()
    calls = harness.service.calls
    sizes = [d["size"] for name, d in calls if name in ("stdin", "stdin_write", "send_input", "send_stdin")]
    limit = 4 * -(-CHUNK // 3) + 1 if harness.kind == "daytona" else CHUNK  # one base64 line for Daytona
    if harness.kind == "e2b":  # uploaded through the file API, once, not over stdin
        assert [d["size"] for name, d in calls if name == "write"] == [len(text)]
        assert max(sizes) <= limit and sum(sizes) < len(text)
    else:
        assert max(sizes) <= limit and sum(sizes) >= len(text)


async def test_restart_after_a_timeout_keeps_the_context(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await _started(harness, tmp_path)
    try:
        await sandbox.execute("kept = 1", None)
        stopped = await sandbox.execute("import time\ntime.sleep(60)", 1.0)
        assert stopped.timed_out and stopped.variables_lost and "the run's time (1 s) ran out" in (stopped.error or "")
        after = await sandbox.execute("print('kept' in globals(), len(context))", None)
        assert after.output == "False 12000\n"
        assert sandbox.starts == 2 and len(harness.service.remotes) == 1  # same sandbox, new worker
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_a_worker_that_exits_mid_cell_is_named_and_replaced(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await _started(harness, tmp_path)
    try:
        await sandbox.execute("kept = 1", None)
        died = await sandbox.execute("import os\nos._exit(3)", None)
        assert died.variables_lost and "exited with code 3" in (died.error or "")
        assert (await sandbox.execute("print('kept' in globals(), len(context))", None)).output == "False 12000\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_a_worker_killed_from_outside_during_a_subcall(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    in_call = asyncio.Event()

    async def handler(kind: str, args: dict[str, Any]) -> str:
        in_call.set()
        return "ok"

    sandbox = harness.make()
    await sandbox.start(SandboxSetup(validate_context("the context " * 1000), handler, scratch=tmp_path))
    try:
        cell = asyncio.create_task(sandbox.execute("llm_query('go')\nimport time\ntime.sleep(60)", None))
        await in_call.wait()
        os.kill(_worker_pid(harness), signal.SIGKILL)
        result = await cell
        assert result.variables_lost and "SIGKILL" in (result.error or "")
        assert (await sandbox.execute("print('back')", None)).output == "back\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_a_worker_that_stops_answering_is_replaced(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await _started(harness, tmp_path)
    try:
        os.kill(_worker_pid(harness), signal.SIGSTOP)
        result = await sandbox.execute("print('never')", 1.0)
        assert result.timed_out and result.variables_lost
        assert (await sandbox.execute("print('back')", None)).output == "back\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_a_frame_cut_in_half_then_exit(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await _started(harness, tmp_path)
    try:
        # The worker's protocol stream is the one its channel writes to (fd 1 is stderr by then).
        code = (
            "import gc, os, struct\n"
            "channel = [o for o in gc.get_objects() if type(o).__name__ == 'WorkerChannel'][0]\n"
            "os.write(channel._out.fileno(), struct.pack('>I', 500) + b'{\"type\": \"res')\nos._exit(0)"
        )
        result = await sandbox.execute(code, None)
        assert result.variables_lost and "exited with code 0" in (result.error or "")
        assert (await sandbox.execute("print(1)", None)).output == "1\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_closing_twice_and_executing_after_close(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await _started(harness, tmp_path)
    await sandbox.execute("import subprocess\np = subprocess.Popen(['/bin/sh', '-c', 'sleep 60'])", None)
    assert len(watch.new()) >= 2
    await sandbox.aclose()
    await sandbox.aclose()
    assert watch.new() == set()
    deletion = {"modal": "terminate", "e2b": "kill"}.get(harness.kind, "delete")
    assert [name for name, _ in harness.service.calls].count(deletion) == 1
    with pytest.raises(SandboxError, match="not started"):
        await sandbox.execute("print(1)", None)


async def test_a_worker_that_cannot_start_deletes_the_sandbox(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = harness.make(python="/nonexistent/python3")
    with pytest.raises(SandboxError, match=f"(the worker did not start in|cannot start) the {harness.kind} sandbox"):
        await sandbox.start(_setup(tmp_path))
    assert harness.remote().destroyed and harness.service.live() == []
    assert watch.new() == set()


async def test_cancelled_while_starting_deletes_the_sandbox(harness: Harness, tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = harness.make()
    task = asyncio.create_task(sandbox.start(_setup(tmp_path)))
    made = asyncio.create_task(harness.service.made.wait())
    await asyncio.wait([task, made], return_when=asyncio.FIRST_COMPLETED)  # the provider has made the sandbox
    made.cancel()
    assert not task.done(), task.exception()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert harness.service.live() == []
    assert watch.new() == set()


def _root_replies(code: str) -> ScriptedModel:
    return by_turn(f"```repl\n{code}\n```", "FINAL(done)")


async def test_cancellation_mid_batch_leaves_no_process_and_no_sandbox(harness: Harness) -> None:
    watch = ProcessWatch()
    started = 0
    enough = asyncio.Event()
    never = asyncio.Event()

    async def slow_sub(messages: list[Message]) -> str:
        nonlocal started
        started += 1
        if started >= 3:
            enough.set()
        await never.wait()
        return "late"

    rlm = RLM(
        backend=_root_replies("print(llm_query_batched(['a', 'b', 'c', 'd']))"),
        other_backends=[ScriptedModel(slow_sub, model_name="sub")],
        environment=harness.kind,
        environment_kwargs=harness.options,
    )
    task = asyncio.create_task(rlm.acompletion("some context", "question"))
    await enough.wait()
    assert watch.new() != set() and len(harness.service.live()) == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watch.new() == set() and harness.service.live() == []


async def test_a_full_run_with_two_levels_of_nested_rlm_query(harness: Harness) -> None:
    watch = ProcessWatch()

    def model(messages: list[Message]) -> str:
        if len(messages) == 1:
            return "leaf says hi"  # a plain llm_query
        turn = turn_of(messages)
        task = messages[1]["content"]
        if "Grandchild task" in task:
            return "```repl\nFINAL('grandchild saw ' + context + ' and ' + llm_query('leaf?'))\n```"
        if "Child task" in task:
            return "```repl\nFINAL(rlm_query('Grandchild task: say', context=context[:3]) + ' via child')\n```"
        if turn == 0:
            return "```repl\nr = rlm_query('Child task: go', context='abcdef')\nFINAL(r)\n```"
        return "FINAL(unreachable)"

    # Nested runs and plain sub-calls go to the sub backend: one script plays every part.
    rlm = RLM(
        backend=ScriptedModel(model, model_name="root"),
        other_backends=[ScriptedModel(model, model_name="sub")],
        environment=harness.kind,
        environment_kwargs=harness.options,
        max_depth=3,
    )
    result = await rlm.acompletion("the root context", "question")
    assert result.finish_reason == "final", result.error
    assert result.response == "grandchild saw abc and leaf says hi via child"
    assert result.metadata["depth_reached"] == 2
    assert result.metadata["isolation"].startswith(f"{harness.kind} cloud sandbox")
    assert len(harness.service.remotes) == 3 and harness.service.live() == []  # one sandbox per level, all gone
    assert watch.new() == set()


@pytest.mark.parametrize(
    ("kind", "variable"),
    [("e2b", "E2B_API_KEY"), ("modal", "MODAL_TOKEN_ID"), ("prime", "PRIME_API_KEY"), ("daytona", "DAYTONA_API_KEY")],
)
async def test_a_missing_credential_is_named(
    kind: str, variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("E2B_API_KEY", "MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "PRIME_API_KEY", "DAYTONA_API_KEY",
                 "DAYTONA_JWT_TOKEN"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    options: dict[str, Any] = {"sdk": FakeModal(Service(tmp_path / "p"))} if kind == "modal" else {}
    sandbox = make_sandbox(kind, options)
    with pytest.raises(ConfigurationError, match=variable):
        await sandbox.start(_setup(tmp_path))


def test_the_factory_knows_the_new_kinds_and_rejects_bad_options() -> None:
    assert isinstance(make_sandbox("modal"), ModalSandbox)
    assert isinstance(make_sandbox("prime", {"cpu_cores": 2, "memory_gb": 4}), PrimeSandbox)
    assert isinstance(make_sandbox("daytona", {"image": "python:3.12-slim", "cpu": 2}), DaytonaSandbox)
    with pytest.raises(ConfigurationError, match="environment='prime'"):
        make_sandbox("prime", {"template": "x"})
    with pytest.raises(ConfigurationError, match="need an image"):
        make_sandbox("daytona", {"cpu": 2})
    with pytest.raises(ConfigurationError, match="sandbox_timeout"):
        make_sandbox("modal", {"sandbox_timeout": 0})


def test_the_sdks_are_imported_only_when_a_sandbox_starts() -> None:
    code = (
        "import sys\nfrom rlm_adapters.core.sandbox import make_sandbox\n"
        "for kind in ('e2b', 'modal', 'prime', 'daytona'):\n    make_sandbox(kind)\n"
        "print(sorted(m for m in ('e2b', 'modal', 'prime_sandboxes', 'daytona') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A provider API on 127.0.0.1 that refuses every key."""

    def _refuse(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = json.dumps({"code": 401, "message": "invalid api key (local test server)", "statusCode": 401}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _refuse

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_api() -> Iterator[http.server.ThreadingHTTPServer]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    server.paths = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("kind", ["e2b", "prime", "daytona"])
async def test_the_real_sdk_client_meets_a_refusing_provider(
    kind: str, refusing_api: http.server.ThreadingHTTPServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fake: the real SDK client, built from the key, against a local API that answers 401."""
    url = f"http://127.0.0.1:{refusing_api.server_address[1]}"
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.prime or ~/.daytona settings of this machine
    if kind == "e2b":
        monkeypatch.setenv("E2B_API_URL", url)
        # In E2B's key format: 2.29 to 2.45 refuse any other before calling the API (which the test must reach).
        sandbox = make_sandbox("e2b", {"api_key": "e2b_" + "0" * 40})
    elif kind == "prime":
        monkeypatch.setenv("PRIME_API_BASE_URL", url)
        sandbox = make_sandbox("prime", {"api_key": "pk-test"})
    else:
        sandbox = make_sandbox("daytona", {"api_key": "dk-test", "api_url": f"{url}/api", "target": "us"})
    with pytest.raises(SandboxError, match=f"cannot start the {kind} sandbox") as caught:
        await sandbox.start(_setup(tmp_path))
    assert "401" in str(caught.value) or "nauthori" in str(caught.value) or "invalid api key" in str(caught.value)
    assert refusing_api.paths  # type: ignore[attr-defined]
    assert getattr(sandbox, "_client", None) is None  # the client it made was closed and dropped


def test_each_provider_has_an_extra_and_all_holds_them() -> None:
    project = tomllib.loads((Path(__file__).parents[4] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert extras["modal"][0].startswith("modal") and extras["daytona"][0].startswith("daytona")
    assert extras["prime"] == ["prime-sandboxes>=0.4.1"]  # older releases bring connect-python, which breaks e2b
    everything = extras["all"][0]
    assert all(name in everything for name in ("modal", "prime", "daytona", "e2b"))
