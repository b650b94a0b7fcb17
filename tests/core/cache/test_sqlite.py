"""The SQLite call cache: its file (mode, stamp, refusals), its writes (durable, first wins), several processes."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from rlm_adapters.core.cache import CachedReply, SQLiteCallCache, open_cache, sqlite_file
from rlm_adapters.core.cache.sqlite_file import APPLICATION_ID
from rlm_adapters.core.lm import LMResponse
from rlm_adapters.errors import CacheError, ConfigurationError


def reply(text: str, cost: float = 0.5) -> CachedReply:
    return CachedReply(text, 10, 2, "m", cost)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_file_is_created_0600_with_its_journal_files(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "calls.sqlite"
    store = SQLiteCallCache(path)
    assert await store.put("k#0", reply("one")) == reply("one")
    # The store's connection is open: SQLite made its -wal and -shm files, with the database's mode.
    assert mode(path) == 0o600
    assert mode(Path(f"{path}-wal")) == 0o600 and mode(Path(f"{path}-shm")) == 0o600
    assert mode(path.parent) == 0o700
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_reply_is_committed_when_put_returns_and_the_first_one_wins(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    store = SQLiteCallCache(path)
    assert await store.get("k#0") is None
    await store.put("k#0", reply("first"))
    # Another connection (another process would be the same) sees it at once: it was committed.
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT text, cost FROM calls WHERE key = 'k#0'").fetchone() == ("first", 0.5)
    assert await store.put("k#0", reply("second")) == reply("first")
    assert await store.get("k#0") == reply("first")
    store.close()
    assert await SQLiteCallCache(path).get("k#0") == reply("first")


async def test_writes_that_arrive_together_all_land(tmp_path: Path) -> None:
    store = SQLiteCallCache(tmp_path / "calls.sqlite")
    await asyncio.gather(*(store.put(f"k{i}#0", reply(str(i))) for i in range(300)))
    got = await asyncio.gather(*(store.get(f"k{i}#0") for i in range(300)))
    assert [r.text if r else None for r in got] == [str(i) for i in range(300)]
    store.close()


async def test_a_put_finishes_when_its_caller_is_cancelled(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    store = SQLiteCallCache(path)
    task = asyncio.create_task(store.put("paid#0", reply("paid for")))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.close()  # waits for the queued work
    assert await SQLiteCallCache(path).get("paid#0") == reply("paid for")


async def test_the_thread_ends_when_idle_and_comes_back(tmp_path: Path) -> None:
    store = SQLiteCallCache(tmp_path / "calls.sqlite", idle_seconds=0.05)
    await store.put("a#0", reply("a"))
    worker = store._worker
    assert worker is not None
    await asyncio.to_thread(worker.join, 5)
    assert not worker.is_alive() and worker.ended
    assert await store.get("a#0") == reply("a")  # a new thread serves it
    assert store._worker is not worker
    store.close()
    assert not any(t.name == "rlm-call-cache" and t.is_alive() for t in threading.enumerate() if t is worker)


def _bytes(path: Path) -> bytes:
    return path.read_bytes()


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.write_text("my notes, not a database\n" * 100), "not an SQLite database"),
        (lambda p: _foreign_db(p), "another SQLite database"),
        (lambda p: _our_db(p, version=7), r"newer rlm-adapters \(schema 7"),
        (lambda p: _our_db(p, table="CREATE TABLE calls (key TEXT)"), "calls table is missing or changed"),
    ],
    ids=["text file", "foreign sqlite", "newer schema", "changed table"],
)
def test_a_file_that_is_not_our_cache_is_refused_by_name_and_left_as_it_is(tmp_path: Path, make, says) -> None:
    path = tmp_path / "calls.sqlite"
    make(path)
    before = _bytes(path)
    with pytest.raises(CacheError, match=says) as info:
        SQLiteCallCache(path)
    assert str(path) in str(info.value) and "left as it is" in str(info.value)
    assert info.value.path == str(path)
    assert _bytes(path) == before
    assert not Path(f"{path}-wal").exists()


def _foreign_db(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('precious')")
    db.close()


def _our_db(path: Path, *, version: int = 1, table: str | None = None) -> None:
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {version}")
        db.execute(table or "CREATE TABLE calls (key TEXT PRIMARY KEY, text TEXT, model TEXT, input_tokens INT, "
                   "output_tokens INT, cost REAL, stored_at REAL)")  # fmt: skip
    db.close()


def test_a_folder_or_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CacheError, match="is a folder"):
        SQLiteCallCache(tmp_path)
    with pytest.raises(CacheError, match="not a regular file"):
        SQLiteCallCache("/dev/null")


def test_an_empty_file_is_made_a_cache_and_gets_our_mode(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    path.touch(mode=0o644)
    os.chmod(path, 0o644)
    SQLiteCallCache(path).close()
    assert mode(path) == 0o600
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_an_existing_cache_readable_by_others_keeps_its_mode_and_is_named_in_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "calls.sqlite"
    SQLiteCallCache(path).close()
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.cache"):
        SQLiteCallCache(path).close()
    assert mode(path) == 0o644
    assert any(str(path) in r.getMessage() and "mode 644" in r.getMessage() for r in caplog.records)


async def test_a_damaged_entry_is_ignored_not_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "calls.sqlite"
    store = SQLiteCallCache(path)
    await store.put("k#0", reply("fine"))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE calls SET input_tokens = 'many', cost = -3 WHERE key = 'k#0'")
    db.close()
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.cache"):
        assert await store.get("k#0") is None
    assert "did not write" in caplog.text
    store.close()


def test_open_cache_takes_a_path_or_a_store_and_refuses_anything_else(tmp_path: Path) -> None:
    store, owned = open_cache(tmp_path / "c.sqlite")
    assert isinstance(store, SQLiteCallCache) and owned
    assert open_cache(store) == (store, False)
    assert open_cache(None) == (None, False)
    with pytest.raises(ConfigurationError, match=r"cache=42 must be a file path"):
        open_cache(42)
    with pytest.raises(ConfigurationError, match="cache='' is not a path"):
        open_cache("")
    store.close()


def _writer(path: str, name: str, start: multiprocessing.synchronize.Barrier) -> None:  # type: ignore[name-defined]
    async def main() -> None:
        store = SQLiteCallCache(path)
        start.wait()
        # Their own keys, and keys both processes write: every write must land, and each shared key once.
        mine = [store.put(f"{name}-{i}#0", reply(f"{name} {i}")) for i in range(400)]
        shared = [store.put(f"shared-{i}#0", reply(f"{name} shared {i}")) for i in range(100)]
        results = await asyncio.gather(*mine, *shared)
        got = {f"shared-{i}#0": r.text for i, r in enumerate(results[400:])}
        Path(f"{path}.{name}.json").write_text(json.dumps(got))
        store.close()

    asyncio.run(main())


def test_two_processes_sharing_one_file_lose_no_write_and_corrupt_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "calls.sqlite")
    SQLiteCallCache(path).close()
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    workers = [context.Process(target=_writer, args=(path, name, start)) for name in ("a", "b")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0, 0]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        keys = {k for (k,) in db.execute("SELECT key FROM calls")}
        shared = dict(db.execute("SELECT key, text FROM calls WHERE key LIKE 'shared-%'").fetchall())
    db.close()
    assert keys == {f"{n}-{i}#0" for n in "ab" for i in range(400)} | {f"shared-{i}#0" for i in range(100)}
    assert all(text.endswith(f"shared {key[7:-2]}") for key, text in shared.items())
    # Whoever lost the race for a shared key was handed the winner's reply: both saw what the file holds.
    for name in "ab":
        assert json.loads(Path(f"{path}.{name}.json").read_text()) == shared
    assert {text.split()[0] for text in shared.values()} <= {"a", "b"}


def _forked_child(store: SQLiteCallCache) -> None:
    async def main() -> None:
        await store.put("child#0", reply("from the child"))
        assert await store.get("parent#0") == reply("from the parent")

    asyncio.run(main())


async def test_a_forked_child_opens_its_own_connection(tmp_path: Path) -> None:
    store = SQLiteCallCache(tmp_path / "calls.sqlite")
    await store.put("parent#0", reply("from the parent"))  # the parent's thread and connection are live
    child = multiprocessing.get_context("fork").Process(target=_forked_child, args=(store,))
    child.start()  # from this thread: the store's thread is not copied into the child
    await asyncio.to_thread(child.join, 60)
    assert child.exitcode == 0
    assert await store.get("child#0") == reply("from the child")
    store.close()


async def test_odd_provider_counts_are_stored_as_the_budget_reads_them(tmp_path: Path) -> None:
    entry = CachedReply.of(LMResponse("text", -5, 3, "m"), float("nan"))
    assert (entry.input_tokens, entry.output_tokens, entry.cost) == (0, 3, 0.0)
    store = SQLiteCallCache(tmp_path / "calls.sqlite")
    await store.put("k#0", entry)
    assert await store.get("k#0") == entry  # and so it replays, instead of being ignored as damaged
    store.close()


def _open_at_once(path: str, start: threading.Barrier, errors: list[BaseException]) -> None:
    start.wait()
    try:
        sqlite_file.prepare(path, timeout=10.0)
    except BaseException as exc:  # every failure is the finding
        errors.append(exc)


def test_workers_opening_one_new_cache_at_once_all_get_it_and_none_calls_it_foreign(tmp_path: Path) -> None:
    # Regression: the stamp was read statement by statement, so a file stamped between two reads looked like
    # another program's database ("no stamp" then "one table") and a second eval worker refused it; and the
    # switch to WAL gave up at once while another worker read the file.
    for round_ in range(40):
        start, errors = threading.Barrier(4), []
        path = str(tmp_path / f"calls-{round_}.sqlite")
        threads = [threading.Thread(target=_open_at_once, args=(path, start, errors)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [], f"round {round_}: {errors}"
