"""The subprocess sandbox: the isolation level it reports is the one it reached, and its limits name themselves."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

from rlm_adapters.core.sandbox import isolation
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.limits import describe_exit, parse_size
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox
from rlm_adapters.errors import SandboxError
from tests.sandbox.sandbox_helpers import ProcessWatch, start

BWRAP = isolation.level_available("bwrap", sys.executable)


@pytest.mark.skipif(
    not BWRAP,
    reason="bubblewrap is missing or refused here (apt-get install bubblewrap); the fallback is tested below",
)
async def test_bwrap_is_the_default_and_is_reported(tmp_path: Path) -> None:
    sandbox = await start(tmp_path)
    try:
        assert sandbox.level == "bwrap"
        assert sandbox.isolation.startswith("bubblewrap: new user, network, mount, PID")
        result = await sandbox.execute("import os\nprint(sorted(os.listdir('/')), os.getcwd(), os.getuid())", None)
        top, cwd, uid = result.output.rsplit(" ", 2)
        # The interpreter's own prefixes are bound read-only too (a virtualenv may live under /tmp or /home).
        prefixes = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if len(Path(p).parts) > 1}
        allowed = {"bin", "dev", "lib", "lib32", "lib64", "opt", "proc", "root", "sbin", "scratch", "usr", *prefixes}
        assert set(ast.literal_eval(top)) <= allowed
        assert (cwd, uid) == ("/scratch", "65534\n")
        for private in ("home", "etc", "tmp"):
            assert private in prefixes or f"'{private}'" not in top
    finally:
        await sandbox.aclose()


async def test_process_level_when_asked_is_stated_plainly(tmp_path: Path) -> None:
    sandbox = await start(tmp_path, isolation="process")
    try:
        assert sandbox.level == "process"
        assert sandbox.isolation.startswith("process only:") and "reach the network" in sandbox.isolation
        result = await sandbox.execute("import os\nprint(sorted(os.environ))", None)
        allowed = {"HOME", "LANG", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "TMPDIR"}
        names = set(ast.literal_eval(result.output))
        assert "PATH" in names and names <= allowed  # PWD comes from the shell that joins the cgroup
    finally:
        await sandbox.aclose()


def test_auto_falls_back_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "level_available", lambda level, python: level == "process")
    sandbox = SubprocessSandbox()
    assert sandbox.level == "process"
    assert "no namespaces on this system" in sandbox.isolation


def test_a_level_asked_for_and_missing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolation, "level_available", lambda level, python: level == "process")
    with pytest.raises(SandboxError, match="isolation='bwrap' is not available"):
        _ = SubprocessSandbox(isolation="bwrap").isolation


def test_a_missing_tool_is_not_reported_as_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    isolation.level_available.cache_clear()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    try:
        assert isolation.detect_level("auto", sys.executable) == "process"
    finally:
        isolation.level_available.cache_clear()


def test_limits_appear_in_the_isolation_text() -> None:
    text = SubprocessSandbox(memory_limit="1GiB", cpu_time_limit=7, cell_timeout=9, capture_chars=500).isolation
    assert "memory 1 GiB" in text and "CPU 7 s per cell" in text and "wall 9 s per cell" in text
    assert "output 500 chars" in text


def test_sizes_and_exit_descriptions() -> None:
    assert parse_size("2GiB") == 2 * 1024**3 and parse_size("512MiB") == 512 * 1024**2 and parse_size(10) == 10
    with pytest.raises(ValueError, match="cannot read the size"):
        parse_size("lots")
    assert describe_exit(-9).startswith("was killed by SIGKILL")
    assert describe_exit(139) == "was killed by SIGSEGV"  # bubblewrap's init reports 128 + signal
    assert describe_exit(3) == "exited with code 3"


async def test_cpu_limit_stops_the_cell_and_keeps_variables(tmp_path: Path) -> None:
    sandbox = await start(tmp_path, cpu_time_limit=1.0, cell_timeout=30.0)
    try:
        await sandbox.execute("kept = 'yes'", None)
        result = await sandbox.execute("while True:\n    pass", None)
        assert "CpuTimeLimitExceeded" in (result.error or "") and "cpu_time_limit" in (result.error or "")
        assert not result.variables_lost
        assert (await sandbox.execute("print(kept)", None)).output == "yes\n"
    finally:
        await sandbox.aclose()


async def test_wall_limit_restarts_with_context_still_loaded(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path, cell_timeout=1.0)
    try:
        await sandbox.execute("kept = 1", None)
        result = await sandbox.execute("import time\ntime.sleep(30)", None)
        assert result.timed_out and result.variables_lost and "cell_timeout" in (result.error or "")
        after = await sandbox.execute("print('kept' in globals(), context)", None)
        assert after.output == "False hello context\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


async def test_output_cap_is_reported(tmp_path: Path) -> None:
    sandbox = await start(tmp_path, capture_chars=100)
    try:
        result = await sandbox.execute("print('x' * 1000)", None)
        assert result.output.startswith("x" * 100 + "\n[output cut: the cell printed 1,001 chars")
        assert "capture_chars" in result.output
    finally:
        await sandbox.aclose()


async def test_unreadable_context_file_is_a_clean_start_error(tmp_path: Path) -> None:
    watch = ProcessWatch()

    async def handler(kind: str, args: dict[str, object]) -> None:
        return None

    sandbox = SubprocessSandbox()
    missing = tmp_path / "context.txt"  # never written: as after a failed (disk full) write
    with pytest.raises(SandboxError, match=r"context file .* is missing or unreadable"):
        await sandbox.start(SandboxSetup("", missing, "text", handler, scratch=tmp_path))
    assert watch.new() == set()


async def test_a_worker_that_cannot_start_leaves_nothing_behind(tmp_path: Path) -> None:
    watch = ProcessWatch()
    groups = set(isolation.CGROUP_PIDS_ROOT.glob("rlm-*")) if isolation.CGROUP_PIDS_ROOT.is_dir() else set()
    with pytest.raises(SandboxError, match="did not start"):
        await start(tmp_path, python=str(tmp_path / "scratch" / "context.txt"))  # not an interpreter
    assert watch.new() == set()
    after = set(isolation.CGROUP_PIDS_ROOT.glob("rlm-*")) if isolation.CGROUP_PIDS_ROOT.is_dir() else set()
    assert after - groups == set()


@pytest.mark.skipif(
    not isolation.level_available("unshare", sys.executable),
    reason="unshare or user namespaces unavailable (apt-get install util-linux; enable user namespaces)",
)
async def test_unshare_level_has_its_own_pids_and_no_network(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path, isolation="unshare")
    try:
        assert sandbox.isolation.startswith("unshare:") and "file system stays visible" in sandbox.isolation
        result = await sandbox.execute("import os, socket\nprint(os.getpid(), socket.if_nameindex())", None)
        assert result.output == "1 [(1, 'lo')]\n"
    finally:
        await sandbox.aclose()
    assert watch.new() == set()
