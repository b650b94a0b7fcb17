"""Issue 35, defect 6: ``runs.json`` bloat. Background results up to 64 MiB each went into one file rewritten
whole on the event loop (4 runs of 40 MiB made it 320 MiB and stalled other clients for seconds), and past
256 MiB ``rlm-mcp --cache`` refused to start. Now: one record per run, written by the store's thread, each at
most `MAX_RECORD_BYTES`, all at most `MAX_TOTAL_BYTES`; an oversized store is cut down at start, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from rlm_adapters.errors import CacheError
from rlm_adapters.mcp_server import parse_config
from rlm_adapters.mcp_server.runs.store import MAX_RECORD_BYTES, RunStore, runs_path
from rlm_adapters.mcp_server.server import run_book

MIB = 1 << 20


def result_of(chars: int) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "x" * chars}], "isError": False}


def test_a_server_starts_on_a_runs_file_past_256_mib_dropping_it_and_saying_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "calls.sqlite"
    legacy = tmp_path / "calls.sqlite.runs.json"
    with legacy.open("wb") as out:  # sparse: 257 MiB long, nothing written
        out.truncate(257 * MIB)
    legacy.chmod(0o600)
    config = parse_config(["--root", str(tmp_path), "--cache", str(cache)], environ={})
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.mcp_server"):
        book = run_book(config)
    assert book.store is not None
    book.store.close()
    assert not legacy.exists()
    assert any("257 MiB" in r.getMessage() and "0 runs kept" in r.getMessage() for r in caplog.records)


def test_the_old_single_file_is_converted_and_its_checks_still_hold(tmp_path: Path) -> None:
    folder = tmp_path / "calls.sqlite.runs"
    legacy = tmp_path / "calls.sqlite.runs.json"
    old = (
        '{"format": "rlm-mcp-runs", "version": 1, "runs": {"' + "A" * 22 + '": {"principal": "local", '
        '"arguments": {"query": "q"}, "state": "done", "result": {"content": []}, "finished": 1.0e10}}}'
    )
    legacy.write_text(old)
    legacy.chmod(0o620)  # group-writable: refused, as before, and left as it is
    with pytest.raises(CacheError, match="could have been written by another user"):
        RunStore(folder, 64, 3600, clock=lambda: 1.0e10)
    assert legacy.read_text() == old
    legacy.chmod(0o600)
    legacy.write_text('{"my": "notes"}')  # a file of someone's by that name is refused and left, too
    with pytest.raises(CacheError, match="is not an rlm-mcp runs file"):
        RunStore(folder, 64, 3600, clock=lambda: 1.0e10)
    legacy.write_text(old)
    store = RunStore(folder, 64, 3600, clock=lambda: 1.0e10)
    found = store.find("local", "A" * 22)
    assert found is not None and found.state == "done" and found.result == {"content": []}
    assert not legacy.exists()
    store.close()


def test_a_result_over_the_record_bound_is_kept_as_a_failure_that_says_what_to_do(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs", 64, 3600)
    store.started("A" * 22, "local", {"query": "q"})
    store.ended("A" * 22, "local", "done", result=result_of(MAX_RECORD_BYTES + 1))
    store.started("B" * 22, "local", {"query": "q", "text": "y" * (MAX_RECORD_BYTES + 1)})
    store.close()
    sizes = [entry.stat().st_size for entry in (tmp_path / "runs").iterdir()]
    assert len(sizes) == 2 and max(sizes) < 4096
    again = RunStore(tmp_path / "runs", 64, 3600)
    big, huge_input = again.find("local", "A" * 22), again.find("local", "B" * 22)
    assert big is not None and big.state == "failed" and big.error is not None
    assert "result (4.0 MiB) was more than the 4 MiB a restart keeps: call rlm_query again" in big.error
    assert huge_input is not None and huge_input.state == "failed"
    assert huge_input.error is not None and "arguments (4.0 MiB) were more than" in huge_input.error
    again.close()


def test_the_total_is_bounded_and_an_oversized_folder_is_cut_down_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    folder = tmp_path / "runs"
    big = RunStore(folder, 64, 3600, clock=lambda: now[0], max_total_bytes=64 * MIB)
    ids = [f"{index:02d}" * 11 for index in range(10)]
    for run_id in ids:
        now[0] += 1
        big.ended(run_id, "local", "done", result=result_of(MIB))
    big.close()
    assert sum(f.stat().st_size for f in folder.iterdir()) > 10 * MIB
    # A server that keeps less (a later version, a smaller bound) starts on it, dropping the oldest.
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.mcp_server"):
        small = RunStore(folder, 64, 3600, clock=lambda: now[0], max_total_bytes=3 * MIB + 4096)
    assert [small.find("local", run_id) is not None for run_id in ids] == [False] * 7 + [True] * 3
    assert any("dropped 7 runs" in r.getMessage() for r in caplog.records)
    for run_id in ("ZZ" * 11, "YY" * 11):  # and it stays within the bound as runs end
        now[0] += 1
        small.ended(run_id, "local", "done", result=result_of(MIB))
    small.close()
    assert sum(f.stat().st_size for f in folder.iterdir()) <= 3 * MIB + 4096


def test_records_are_written_by_the_stores_thread_never_the_event_loops(tmp_path: Path) -> None:
    seen: list[threading.Thread] = []

    class Result(BaseModel):
        text: str

        def model_dump(self, **kwargs: Any) -> dict[str, Any]:
            seen.append(threading.current_thread())
            return super().model_dump(**kwargs)

    store = RunStore(tmp_path / "runs", 64, 3600)
    written: list[threading.Thread] = []
    real_replace = os.replace

    def replace(*args: Any, **kwargs: Any) -> None:
        written.append(threading.current_thread())
        real_replace(*args, **kwargs)

    async def main() -> threading.Thread:
        store.started("A" * 22, "local", {"query": "q"})
        store.ended("A" * 22, "local", "done", result=Result(text="x" * MIB))
        return threading.current_thread()

    os.replace = replace  # type: ignore[assignment]
    try:
        loop_thread = asyncio.run(main())
        store.close()
    finally:
        os.replace = real_replace
    assert len(seen) == 1 and len(written) == 2
    assert loop_thread not in seen + written
    found = RunStore(tmp_path / "runs", 64, 3600).find("local", "A" * 22)
    assert found is not None and found.result == {"text": "x" * MIB}


@pytest.mark.parametrize(
    "attack", ["group-writable folder", "linked folder", "linked record", "writable record", "fifo record"]
)
def test_a_folder_or_record_someone_else_could_have_written_is_refused(tmp_path: Path, attack: str) -> None:
    folder = tmp_path / "calls.sqlite.runs"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (elsewhere / ("A" * 22 + ".e.json")).write_text("{}")
    if attack == "linked folder":
        folder.symlink_to(elsewhere)
    else:
        folder.mkdir(mode=0o700)
    if attack == "group-writable folder":
        folder.chmod(0o770)
    if attack == "linked record":
        (folder / ("A" * 22 + ".e.json")).symlink_to(elsewhere / ("A" * 22 + ".e.json"))
    if attack == "writable record":
        record = folder / ("A" * 22 + ".e.json")
        record.write_text("{}")
        record.chmod(0o666)
    if attack == "fifo record":
        os.mkfifo(folder / ("A" * 22 + ".e.json"), 0o600)
    with pytest.raises(CacheError, match=r"link|another user|not a folder|not a regular file"):
        RunStore(folder, 64, 3600)


def test_the_runs_folder_is_private(tmp_path: Path) -> None:
    store = RunStore(runs_path(tmp_path / "calls.sqlite"), 64, 3600)
    store.started("A" * 22, "local", {"query": "q"})
    store.close()
    assert os.stat(store.path).st_mode & 0o777 == 0o700
    assert [os.stat(f).st_mode & 0o777 for f in store.path.iterdir()] == [0o600]


def test_a_fifo_planted_after_start_is_unknown_and_hangs_nothing(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs", 64, 3600)
    os.mkfifo(tmp_path / "runs" / ("A" * 22 + ".e.json"), 0o600)
    assert store.find("local", "A" * 22) is None
    store.close()
