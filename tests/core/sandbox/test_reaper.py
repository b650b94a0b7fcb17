"""The reaper: a close kills at once, the slow clean-up follows in the background and leaves nothing."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.sandbox.reaper import REAPER, Reaper
from tests.core.sandbox.helpers import ProcessWatch, alive, descendants, start

_MIB = 1024 * 1024


def test_jobs_run_in_order_and_a_failing_one_does_not_stop_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    reaper = Reaper()
    ran: list[int] = []

    def fail() -> None:
        raise OSError("the folder is busy")

    reaper.submit(lambda: ran.append(1))
    reaper.submit(fail)
    reaper.submit(lambda: ran.append(2))
    with caplog.at_level(logging.ERROR, logger="rlm_adapters.sandbox"):
        assert reaper.flush(5.0)
    assert ran == [1, 2] and reaper.done == 3 and reaper.pending == 0
    assert "a sandbox clean-up job failed" in caplog.text


def test_flush_says_false_while_a_job_is_still_running() -> None:
    reaper = Reaper()
    gate = threading.Event()
    reaper.submit(gate.wait)
    assert not reaper.flush(0.05) and reaper.pending == 1
    gate.set()
    assert reaper.flush(5.0) and reaper.pending == 0


async def test_close_kills_every_process_even_one_that_left_the_group_before_the_reaper_runs(
    tmp_path: Path,
) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path, memory_limit=731 * _MIB, cell_timeout=20.0)
    worker = sandbox._worker
    assert worker is not None
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()  # leaves the process group: only the cgroup still holds it\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n"
        "if os.fork() == 0:\n"
        "    time.sleep(120)\n"
        "    os._exit(0)\n"
        "time.sleep(0.3)\n"
        "print('forked')\n"
    )
    result = await sandbox.execute(code, None)
    assert result.output == "forked\n", result
    sandbox_processes = set(descendants(sandbox.worker_pid))
    assert len(sandbox_processes) >= 3  # the worker and its two children (bubblewrap's own aside)
    gate = threading.Event()
    REAPER.submit(gate.wait)  # the reaper is busy: whatever dies now, the close itself killed
    try:
        await sandbox.aclose()
        deadline = time.monotonic() + 5.0
        while any(alive(pid) for pid in sandbox_processes) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert {pid for pid in sandbox_processes if alive(pid)} == set()
        assert REAPER.pending >= 2  # the close's clean-up waits behind the gate
    finally:
        gate.set()
    assert watch.new() == set()  # `new` flushes the reaper
    assert not worker.root.exists()
    assert worker.cgroup is None or not any(path.exists() for path in worker.cgroup.paths)


def test_a_nested_run_leaves_no_folder_once_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # TMPDIR is read again

    private = tmp_path / f"rlm-{os.geteuid()}"  # every folder of a run or a sandbox is made in it
    made: set[str] = set()

    def reply(messages: list[Message]) -> str:
        made.update(p.name for p in private.iterdir())  # while the run is live
        first = "```repl\nprint(rlm_query('child task'))\n```"
        return first if len(messages) <= 2 else "FINAL(done)"

    rlm = RLM(
        backend=ScriptedModel(reply, model_name="root"),
        environment="subprocess",
        environment_kwargs={"memory_limit": 732 * _MIB},
        max_depth=2,
    )
    result = rlm.completion("some context", "question")
    assert result.finish_reason == "final"
    assert REAPER.flush()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("rlm-") and p != private] == []
    left = [p.name for p in private.iterdir()]
    assert any(name.startswith("rlm-run-") for name in made)  # the run did make its folder there
    spares = [name for name in left if name.startswith("rlm-worker-")]
    assert [name for name in left if name not in spares] == []  # the run's own folder is gone


def test_a_forked_child_gets_a_working_reaper_of_its_own() -> None:
    import os

    reaper = Reaper()
    gate = threading.Event()
    reaper.submit(gate.wait)  # the parent's job, still running when the fork happens
    pid = os.fork()
    if pid == 0:  # the child: its reaper has nothing pending and runs new jobs
        ran: list[int] = []
        reaper.submit(lambda: ran.append(1))
        os._exit(0 if reaper.flush(5.0) and ran == [1] else 1)
    _, status = os.waitpid(pid, 0)
    gate.set()
    assert reaper.flush(5.0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_jobs_handed_over_just_before_exit_still_run(tmp_path: Path) -> None:
    import subprocess
    import sys

    marker = tmp_path / "cleaned"
    program = (
        "import pathlib, time\n"
        "from rlm_adapters.core.sandbox.reaper import REAPER\n"
        "def job():\n"
        "    time.sleep(0.3)\n"
        f"    pathlib.Path({str(marker)!r}).write_text('done')\n"
        "REAPER.submit(job)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "done"


def test_importing_the_sandbox_layer_starts_no_thread_and_hooks_nothing() -> None:
    """The reaper starts with its first job: importing (or a run that hands it nothing) costs no thread."""
    import subprocess
    import sys

    program = (
        "import atexit, logging, threading\n"  # logging hooks exit itself: loaded before counting
        "hooks = atexit._ncallbacks()\n"
        "import rlm_adapters\n"
        "from rlm_adapters.core.sandbox import REAPER\n"
        "import rlm_adapters.core.sandbox.local, rlm_adapters.core.sandbox.docker\n"
        "print(atexit._ncallbacks() - hooks, REAPER.running, threading.active_count())\n"
        "REAPER.submit(lambda: None)\n"
        "print(atexit._ncallbacks() - hooks, REAPER.running, REAPER.flush(5.0))\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.splitlines() == ["0 False 1", "1 True True"]


def test_reset_finishes_the_jobs_and_ends_the_thread_and_the_next_job_starts_one() -> None:
    reaper = Reaper()
    ran: list[int] = []
    gate = threading.Event()
    reaper.submit(gate.wait)
    reaper.submit(lambda: ran.append(1))
    assert not reaper.reset(timeout=0.05)  # a job still runs: nothing is dropped, the thread stays
    assert reaper.running
    gate.set()
    assert reaper.reset() and not reaper.running and ran == [1] and reaper.pending == 0
    reaper.submit(lambda: ran.append(2))
    assert reaper.flush(5.0) and ran == [1, 2] and reaper.running
    assert reaper.reset()
