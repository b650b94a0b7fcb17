"""Faults: each ends in a clean error or a restart, keeps what was already final, and leaves no process."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.sandbox import base as sandbox_base
from rlm_adapters.core.sandbox.context_store import ContextStore
from rlm_adapters.testing import by_turn
from tests.core.sandbox.helpers import ProcessWatch, start, worker_pid


async def test_worker_killed_mid_cell_restarts(tmp_path: Path) -> None:
    watch = ProcessWatch()
    in_cell = asyncio.Event()

    async def handler(kind: str, args: dict[str, Any]) -> str:
        in_cell.set()
        return "ok"

    sandbox = await start(tmp_path, handler)
    try:
        await sandbox.execute("kept = 1", None)
        cell = asyncio.create_task(sandbox.execute("llm_query('go')\nimport time\ntime.sleep(60)", None))
        await in_cell.wait()
        os.kill(worker_pid(sandbox), signal.SIGKILL)
        result = await cell
        assert result.variables_lost and "SIGKILL" in (result.error or "")
        after = await sandbox.execute("print('kept' in globals(), context)", None)
        assert after.output == "False hello context\n"
        assert sandbox.starts == 2
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_worker_that_stops_answering_is_replaced(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path)
    try:
        os.kill(worker_pid(sandbox), signal.SIGSTOP)
        result = await sandbox.execute("print('never')", 1.0)
        assert result.timed_out and result.variables_lost and "the run's time (1 s) ran out" in (result.error or "")
        assert (await sandbox.execute("print('back')", None)).output == "back\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_frame_cut_in_half_then_exit(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path)
    try:
        code = "import os, struct\nos.write(3, struct.pack('>I', 500) + b'{\"type\": \"res')\nos._exit(0)"
        result = await sandbox.execute(code, None)
        assert result.variables_lost and "exited with code 0" in (result.error or "")
        assert (await sandbox.execute("print(1)", None)).output == "1\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_closing_twice_and_executing_after_close(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path)
    await sandbox.execute("import subprocess\np = subprocess.Popen(['/bin/sh', '-c', 'sleep 60'])", None)
    assert len(watch.new()) >= 2
    await sandbox.aclose()
    await sandbox.aclose()
    assert watch.new() == set()
    with pytest.raises(Exception, match="not started"):
        await sandbox.execute("print(1)", None)


def _root_replies(code: str) -> ScriptedModel:
    return by_turn(f"```repl\n{code}\n```", "FINAL(done)")


async def test_cancellation_mid_batch_leaves_no_process() -> None:
    watch = ProcessWatch()
    started = 0
    enough = asyncio.Event()
    never = asyncio.Event()

    async def slow_sub(messages: list[Message]) -> str:
        nonlocal started
        started += 1
        if started >= 3:
            enough.set()
        await never.wait()  # a sub-model that does not answer before the run is cancelled
        return "late"

    rlm = RLM(
        backend=_root_replies("print(llm_query_batched(['a', 'b', 'c', 'd']))"),
        other_backends=[ScriptedModel(slow_sub, model_name="sub")],
        environment="subprocess",
    )
    task = asyncio.create_task(rlm.acompletion("some context", "question"))
    await enough.wait()
    assert watch.new() != set()  # the worker is there, blocked in the batch
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watch.new() == set()


async def test_context_file_that_cannot_be_written(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = ProcessWatch()

    def disk_full(context: Any, folder: Path) -> Path:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sandbox_base, "write_context_file", disk_full)
    monkeypatch.setattr(ContextStore, "_write_file", lambda self, context: disk_full(context, Path()))  # shared
    rlm = RLM(backend=_root_replies("print(1)"), environment="subprocess", raise_on_error=False)
    try:
        result = await rlm.acompletion("some context", "question")
    except OSError as exc:  # the loop does not turn it into a result (see the report): still clean
        assert exc.errno == errno.ENOSPC
    else:
        assert result.finish_reason == "error" and "No space left" in (result.error or "")
    assert watch.new() == set()


async def test_a_final_answer_is_kept_and_the_processes_it_left_are_ended() -> None:
    watch = ProcessWatch()
    code = "import subprocess\nsubprocess.Popen(['/bin/sh', '-c', 'sleep 60'])\nanswer = 'kept'\nFINAL_VAR('answer')"
    rlm = RLM(
        backend=_root_replies(code),
        environment="subprocess",
    )
    result = await rlm.acompletion("some context", "question")
    assert result.finish_reason == "final" and result.response == "kept"
    assert result.metadata["isolation"].startswith(("bwrap (", "unshare +"))  # what auto may choose
    assert watch.new() == set()
