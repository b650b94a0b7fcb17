"""Issue 35, also covered: three processes writing one cache at once.

Three real processes open one new file at the same moment (so they also race to create and stamp it), each
stores replies under keys of its own and under keys all three share, and reads everything back. Nothing is lost
or damaged, nothing "database is locked" reaches a caller, and every shared key holds one reply that every
process was handed back (the first stored wins).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.cache import CachedReply, SQLiteCallCache

WRITERS, OWN, SHARED = 3, 120, 60


def writer(path: str, number: int, start: Any, results: Any) -> None:
    async def work() -> dict[str, str]:
        store = SQLiteCallCache(path)
        seen: dict[str, str] = {}
        for burst in range(4):
            keys = [f"own-{number}-{i}#0" for i in range(burst, OWN, 4)]
            keys += [f"shared-{i}#0" for i in range(burst, SHARED, 4)]
            stored = await asyncio.gather(
                *(store.put(key, CachedReply(f"{key} from writer {number}", 1, 1, "m", 0.0)) for key in keys)
            )
            seen.update((key, reply.text) for key, reply in zip(keys, stored, strict=True))
            store.close()  # as after idle seconds: the next burst connects again (and checks the files again)
        for key in list(seen):
            reply = await store.get(key)
            assert reply is not None and reply.text == seen[key], key
        store.close()
        return seen

    start.wait()
    try:
        results.put((number, asyncio.run(work()), None))
    except BaseException as exc:  # reported to the test, which fails naming it
        results.put((number, {}, f"{type(exc).__name__}: {exc}"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", [0o700, 0o1777], ids=["a private folder", "a sticky shared folder"])
def test_three_processes_store_and_read_one_cache_at_once(tmp_path: Path, mode: int) -> None:
    """In a sticky folder each connection also creates the companion files first (item 3): still no race."""
    folder = tmp_path / "cache"
    folder.mkdir()
    os.chmod(folder, mode)
    path = str(folder / "calls.sqlite")
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    processes = [context.Process(target=writer, args=(path, n, start, results)) for n in range(WRITERS)]
    for process in processes:
        process.start()
    start.set()
    outcomes = [results.get(timeout=200) for _ in processes]
    for process in processes:
        process.join(timeout=30)
    assert [p.exitcode for p in processes] == [0] * WRITERS
    assert [error for _n, _seen, error in outcomes] == [None] * WRITERS

    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = dict(db.execute("SELECT key, text FROM calls").fetchall())
    db.close()
    assert len(rows) == WRITERS * OWN + SHARED  # nothing lost, nothing stored twice
    for number, seen, _error in outcomes:
        assert len(seen) == OWN + SHARED
        for key, text in seen.items():
            assert rows[key] == text  # what each was handed back is what the file holds
            if key.startswith("own-"):
                assert text.endswith(f"from writer {number}")
