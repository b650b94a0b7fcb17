"""The e2b sandbox against fakes of the SDK's objects (no E2B account is reachable here).

`FakeAsyncSandbox` has the SDK's shape (``files.write``, ``commands.run(background=True, stdin=True,
on_stdout=...)``, ``commands.send_stdin``, ``handle.kill`` / ``wait`` / ``exit_code``, ``kill``) and runs the
command for real in a local process (as the sandbox's shell would split it), mapping the remote folder onto
a temporary one: so the uploaded context, the bootstrap, its base64 stdout and the frames are exercised end
to end, with stdout handed back as text in odd-sized chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.cloud.e2b import E2BSandbox
from rlm_adapters.core.sandbox.cloud.transport import LineDecoder
from rlm_adapters.errors import ConfigurationError

SCRATCH = E2BSandbox.scratch


class FakeHandle:
    def __init__(self, process: asyncio.subprocess.Process, pump: asyncio.Task[None]) -> None:
        self.pid = process.pid
        self.process = process
        self.pump = pump

    @property
    def exit_code(self) -> int | None:
        return self.process.returncode

    async def wait(self) -> int:
        code = await self.process.wait()
        await self.pump  # the SDK delivers every output event before the end
        if code != 0:
            raise RuntimeError(f"CommandExitException: exit code {code}")  # what the SDK raises
        return code

    async def kill(self) -> bool:
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        await self.process.wait()
        await self.pump
        return True


class FakeFiles:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.written: dict[str, int] = {}

    def local(self, path: str) -> Path:
        assert path.startswith(SCRATCH), path
        return self.root / path[len(SCRATCH) + 1 :]

    async def write(self, path: str, data: Any) -> None:
        body = data if isinstance(data, bytes) else data.encode() if isinstance(data, str) else data.read()
        self.local(path).write_bytes(body)
        self.written[path] = len(body)


class FakeCommands:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.handles: dict[int, FakeHandle] = {}
        self.envs: list[dict[str, str] | None] = []
        self.commands: list[str] = []

    async def run(
        self,
        cmd: str,
        *,
        background: bool,
        stdin: bool,
        on_stdout: Any,
        on_stderr: Any,
        envs: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 60,
    ) -> FakeHandle:
        assert background and stdin
        self.envs.append(envs)
        self.commands.append(cmd)
        words = shlex.split(cmd)  # the sandbox's shell runs it: `exec env -i NAME=value ... python3 ...`
        assert words[:3] == ["exec", "env", "-i"], cmd
        argv = [sys.executable if w == "python3" else w.replace(SCRATCH, str(self.root)) for w in words[1:]]
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={},
            cwd=self.root,
        )

        async def pump() -> None:
            assert process.stdout is not None
            while chunk := await process.stdout.read(7):  # odd-sized pieces: lines arrive split
                on_stdout(chunk.decode())

        handle = FakeHandle(process, asyncio.create_task(pump()))
        self.handles[process.pid] = handle
        return handle

    async def send_stdin(self, pid: int, data: bytes) -> None:
        stream = self.handles[pid].process.stdin
        assert stream is not None
        stream.write(data)
        await stream.drain()


class FakeAsyncSandbox:
    def __init__(self, root: Path) -> None:
        self.files = FakeFiles(root)
        self.commands = FakeCommands(root)
        self.killed = False

    async def kill(self) -> bool:
        for handle in self.commands.handles.values():
            await handle.kill()
        self.killed = True
        return True


@pytest.fixture
def remote_root(tmp_path: Path) -> Path:
    root = tmp_path / "remote"
    root.mkdir()
    return root


async def _started(tmp_path: Path, remote_root: Path, **options: Any) -> tuple[E2BSandbox, FakeAsyncSandbox]:
    fake = FakeAsyncSandbox(remote_root)
    created: list[dict[str, Any]] = []

    async def factory(**kwargs: Any) -> FakeAsyncSandbox:
        created.append(kwargs)
        return fake

    sandbox = E2BSandbox(sandbox_factory=factory, **options)

    async def handler(kind: str, args: dict[str, Any]) -> str:
        return f"host answered {kind}({args['prompt']})"

    await sandbox.start(SandboxSetup(validate_context("the context " * 1000), handler, scratch=tmp_path))
    assert created == [{"template": None, "timeout": 3600, "envs": {}}]
    return sandbox, fake


async def test_e2b_runs_cells_and_subcalls_over_the_fake_sdk(tmp_path: Path, remote_root: Path) -> None:
    sandbox, fake = await _started(tmp_path, remote_root)
    try:
        assert fake.files.written[f"{SCRATCH}/context.txt"] == len("the context " * 1000)
        result = await sandbox.execute("x = len(context)\nprint(x, llm_query('hi'))", None)
        assert result.error is None
        assert result.output == "12000 host answered llm_query(hi)\n"
        big = await sandbox.execute("print('é' * 50_000)", None)  # many base64 lines, split mid-line
        assert big.output == "é" * 50_000 + "\n"
        assert fake.commands.envs == [{}]  # nothing of the host's environment is sent
        env = await sandbox.execute("import os\nprint(sorted(os.environ))", None)
        names = "['HOME', 'LANG', 'PATH', 'PYTHONDONTWRITEBYTECODE', 'PYTHONUNBUFFERED', 'TMPDIR']"
        assert env.output == f"{names}\n"  # nor of the template's (env -i)
    finally:
        await sandbox.aclose()
    assert fake.killed


async def test_e2b_restarts_the_worker_after_a_timeout(tmp_path: Path, remote_root: Path) -> None:
    sandbox, _ = await _started(tmp_path, remote_root)
    try:
        await sandbox.execute("kept = 1", None)
        stopped = await sandbox.execute("import time\ntime.sleep(60)", 1.0)
        assert stopped.timed_out and stopped.variables_lost and "cell_timeout" in (stopped.error or "")
        after = await sandbox.execute("print('kept' in globals(), len(context))", None)
        assert after.output == "False 12000\n"
        assert sandbox.starts == 2
    finally:
        await sandbox.aclose()


async def test_e2b_reports_a_worker_that_dies_mid_cell_at_once(tmp_path: Path, remote_root: Path) -> None:
    """The command's end ends the output stream: the cell does not wait for its time limit to find out."""
    sandbox, _ = await _started(tmp_path, remote_root)
    try:
        died = await asyncio.wait_for(sandbox.execute("import os\nos._exit(3)", 60.0), 20.0)
        assert died.variables_lost and not died.timed_out
        assert "exited with code 3" in (died.error or "")
        after = await sandbox.execute("print(len(context))", None)
        assert after.output == "12000\n" and sandbox.starts == 2
    finally:
        await sandbox.aclose()


async def test_e2b_without_a_key_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2B_API_KEY", raising=False)

    async def handler(kind: str, args: dict[str, Any]) -> None:
        return None

    with pytest.raises(ConfigurationError, match="E2B_API_KEY"):
        await E2BSandbox().start(SandboxSetup(validate_context("x"), handler, scratch=tmp_path))


def test_line_decoder_joins_split_lines() -> None:
    async def run() -> bytes:
        decoder = LineDecoder()
        for piece in ["aGVs", "bG8=\nIHdv", "cmxk\n", "\n"]:
            decoder.feed(piece)
        decoder.close()
        return await decoder.reader.read()

    assert asyncio.run(run()) == b"hello world"
