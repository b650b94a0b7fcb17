"""`reset_process_state` gives a process back what a fresh interpreter has, after real runs left state behind."""

from __future__ import annotations

import json
import subprocess
import sys

PROGRAM = """
import asyncio, json, sys, tempfile
from pathlib import Path
from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox import REAPER, SandboxSetup
from rlm_adapters.core.sandbox.local import LocalSandbox
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox, bytecode, isolation, spares
from rlm_adapters.testing import reset_process_state

async def no_calls(kind, args):
    return None

async def leave_state_behind(folder):
    setup = SandboxSetup(validate_context("ctx"), no_calls, scratch=Path(folder))
    local = LocalSandbox()
    await local.start(setup)  # never closed: its stream routing stays held
    sandbox = SubprocessSandbox()
    await sandbox.start(setup)
    await sandbox.execute("x = 1", None)
    await sandbox.aclose()  # the reaper runs its half; a spare is kept for the next run

def state():
    spares.POOL.wait_idle()
    return {
        "stdout_is_the_hosts": sys.stdout is HOST_OUT and sys.stderr is HOST_ERR,
        "reaper_running": REAPER.running,
        "idle_spares": len(spares.POOL.pids()),
        "probes_cached": isolation._proven.cache_info().currsize,
        "bytecode_cached": bytecode._launch_bytecode.cache_info().currsize,
    }

HOST_OUT, HOST_ERR = sys.stdout, sys.stderr
with tempfile.TemporaryDirectory() as folder:
    asyncio.run(leave_state_behind(folder))
    before = state()
    reset_process_state()
    after = state()
print(json.dumps([before, after]), file=sys.__stdout__)
"""


def test_reset_process_state_undoes_what_runs_leave_behind() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    assert before["stdout_is_the_hosts"] is False and before["reaper_running"] is True
    assert before["idle_spares"] >= 1 and before["probes_cached"] >= 1 and before["bytecode_cached"] >= 1
    assert after == {
        "stdout_is_the_hosts": True,
        "reaper_running": False,
        "idle_spares": 0,
        "probes_cached": 0,
        "bytecode_cached": 0,
    }
