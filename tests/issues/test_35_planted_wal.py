"""Issue 35, item 3: a `-wal` file another user planted beside a live cache became root-model code.

The owner and mode checks ran once, when the store opened; the store reconnects after idle seconds, and SQLite
recovers whatever `-wal` it finds. Another uid wrote only `calls.sqlite-wal` into a 1777 folder, and the
victim's cache served its replies. Now every connection checks the companions, and a folder others can write is
refused unless it is sticky.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.cache import CachedReply, SQLiteCallCache
from rlm_adapters.errors import CacheError

STRANGER = 54_321  # a uid that is not ours
PLANTED = "```repl\nprint('planted code ran')\n```"


def as_root() -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("planting a file as another user needs root (chown)")


def shared_folder(tmp_path: Path, mode: int = 0o1777) -> Path:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, mode)
    return folder


def planted_wal(cache: Path, scratch: Path, keys: list[str]) -> bytes:
    """A real WAL over a copy of `cache` whose frames store PLANTED under `keys` (made by a second connection)."""
    copy = scratch / "attacker.sqlite"
    shutil.copyfile(cache, copy)
    db = sqlite3.connect(copy, isolation_level=None)
    try:
        assert db.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
        db.execute("PRAGMA wal_autocheckpoint = 0")
        for key in keys:
            db.execute("INSERT OR REPLACE INTO calls VALUES (?, ?, 'root', 1, 1, 0.0, ?)", (key, PLANTED, time.time()))
        data = Path(f"{copy}-wal").read_bytes()
    finally:
        db.close()
    assert len(data) > 32  # a header and frames
    return data


def plant(cache: Path, data: bytes) -> Path:
    wal = Path(f"{cache}-wal")
    wal.write_bytes(data)
    os.chown(wal, STRANGER, STRANGER)
    os.chmod(wal, 0o644)
    return wal


async def test_a_wal_planted_between_two_connections_is_refused_and_never_served(tmp_path: Path) -> None:
    as_root()
    folder = shared_folder(tmp_path)
    path = folder / "calls.sqlite"
    store = SQLiteCallCache(path)
    mine = CachedReply("FINAL(mine)", 1, 1, "root", 0.0)
    await store.put("k0#0", mine)
    store.close()  # the store's thread ends (as after idle seconds): the next call connects again
    assert not Path(f"{path}-wal").exists()  # SQLite folds it in and removes it as the last connection closes
    plant(path, planted_wal(path, tmp_path, ["k0#0", "k1#0"]))

    for key in ("k0#0", "k1#0"):
        with pytest.raises(CacheError, match="its -wal file belongs to another user") as info:
            await store.get(key)
        message = str(info.value)
        assert "\n" not in message and repr(str(path)) in message
    store.close()
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:  # immutable: reads no WAL
        rows = dict(db.execute("SELECT key, text FROM calls").fetchall())
    db.close()
    assert rows == {"k0#0": "FINAL(mine)"}  # nothing planted reached the file either


def test_a_run_over_a_planted_wal_goes_live_and_the_planted_code_never_runs(tmp_path: Path) -> None:
    as_root()
    path = shared_folder(tmp_path) / "calls.sqlite"
    answers = iter(["FINAL(first answer)", "FINAL(live answer)"])
    root = ScriptedModel(lambda messages: next(answers), model_name="root")
    rlm = RLM(backend=root, environment="local", cache=path)
    assert rlm.completion("ctx", "q").response == "first answer"
    assert rlm.cache is not None
    rlm.cache.close()  # as after idle seconds: the store connects again on the next call
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        keys = [row[0] for row in db.execute("SELECT key FROM calls")]
    db.close()
    assert len(keys) == 1 and not Path(f"{path}-wal").exists()
    plant(path, planted_wal(path, tmp_path, keys))

    result = rlm.completion("ctx", "q")  # the same request: the planted reply would have been a hit
    rlm.close()
    assert result.response == "live answer" and len(root.calls) == 2
    assert result.usage_summary.to_dict()["total"].get("cached_calls", 0) == 0
    assert "planted code ran" not in repr(root.calls)  # its output would be in the live call's history


async def test_a_folder_others_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    path = shared_folder(tmp_path, 0o777) / "calls.sqlite"
    with pytest.raises(CacheError, match=r"its folder can be written by others \(mode 777, not sticky\)") as info:
        SQLiteCallCache(path)
    assert "\n" not in str(info.value) and "folder of your own" in str(info.value)
    for mode in (0o770, 0o730):
        os.chmod(path.parent, mode)
        with pytest.raises(CacheError, match="its folder can be written by others"):
            SQLiteCallCache(path)


async def test_a_folder_made_writable_later_is_refused_on_the_next_connection(tmp_path: Path) -> None:
    folder = shared_folder(tmp_path, 0o700)
    path = folder / "calls.sqlite"
    store = SQLiteCallCache(path)
    await store.put("k#0", CachedReply("kept", 1, 1, "m", 0.0))
    store.close()
    os.chmod(folder, 0o777)
    with pytest.raises(CacheError, match="its folder can be written by others"):
        await store.get("k#0")
    store.close()


async def test_in_a_sticky_folder_the_companions_are_taken_before_sqlite_looks(tmp_path: Path) -> None:
    """Created empty, ours, 0600, before each connection: another user can then never put a file under the names."""
    path = shared_folder(tmp_path) / "calls.sqlite"
    store = SQLiteCallCache(path)
    assert await store.put("k#0", CachedReply("kept", 1, 1, "m", 0.0)) == CachedReply("kept", 1, 1, "m", 0.0)
    for suffix in ("-wal", "-shm", "-journal"):
        info = os.lstat(f"{path}{suffix}")  # all three exist while the store's connection is open
        assert info.st_uid == os.geteuid() and not info.st_mode & 0o022
    assert (await store.get("k#0")) == CachedReply("kept", 1, 1, "m", 0.0)
    store.close()


async def test_a_folder_of_another_user_is_refused(tmp_path: Path) -> None:
    as_root()
    folder = shared_folder(tmp_path, 0o755)
    os.chown(folder, STRANGER, STRANGER)
    with pytest.raises(CacheError, match=f"its folder belongs to another user \\(uid {STRANGER}\\)"):
        SQLiteCallCache(folder / "calls.sqlite")


@pytest.mark.parametrize("kind", ["hard link", "fifo"])
async def test_a_companion_that_is_a_hard_link_or_a_fifo_is_refused_without_hanging(tmp_path: Path, kind: str) -> None:
    folder = shared_folder(tmp_path, 0o700)
    path = folder / "calls.sqlite"
    store = SQLiteCallCache(path)
    await store.put("k#0", CachedReply("kept", 1, 1, "m", 0.0))
    store.close()
    wal = Path(f"{path}-wal")
    if wal.exists():
        wal.unlink()
    if kind == "hard link":
        elsewhere = tmp_path / "elsewhere-wal"
        elsewhere.write_bytes(b"")
        os.chmod(elsewhere, 0o600)
        os.link(elsewhere, wal)
        says = "has other names"
    else:
        os.mkfifo(wal, 0o600)
        says = "is not a regular file"
    with pytest.raises(CacheError, match=f"its -wal file {says}"):
        await asyncio.wait_for(store.get("k#0"), 30)
    store.close()
