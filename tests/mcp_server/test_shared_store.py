"""The runs and session records replicas share (`runs.shared_store`, `sessions.shared_store`), in process against a
real PostgreSQL: what a hostile or broken row, result, environment or race does to them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from mcp_types import CallToolResult, TextContent

from rlm_adapters.core.cache import PostgresStore
from rlm_adapters.core.cache.postgres_schema import LATEST
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.mcp_server.replica import LEASE_VARIABLE, Lease, Replica
from rlm_adapters.mcp_server.runs.background import Run, RunBook, Work
from rlm_adapters.mcp_server.runs.shared_store import SharedRunStore
from rlm_adapters.mcp_server.server import run_book
from rlm_adapters.mcp_server.sessions.shared_store import SessionElsewhere, SharedSessionStore
from rlm_adapters.mcp_server.setup.config import parse_config

RUN = "A" * 22
ARGUMENTS = {"query": "q", "text": "t"}


_made: list[Replica] = []


def replica(seconds: float) -> Replica:
    """A replica with `seconds` leases, whose renewing thread the `database` fixture ends."""
    made = Replica(Lease(seconds))
    _made.append(made)
    return made


@pytest.fixture
def database(store_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(store_url)
    try:
        yield store
    finally:
        while _made:  # first: a renewal would open the store's connections again
            _made.pop().close()
        store.close()


def runs(database: PostgresStore, lease: float = 0.3, keep_seconds: float = 3600.0) -> SharedRunStore:
    return SharedRunStore(database, 16, keep_seconds, replica(lease))


def test_the_tables_are_a_step_of_the_schema(store_url: str, database: PostgresStore) -> None:
    with psycopg.connect(store_url) as connection:
        version = connection.execute("SELECT max(version) FROM rlm_schema_version").fetchone()
        tables = {row[0] for row in connection.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'rlm_%'")}
    assert version == (LATEST,) and {"rlm_runs", "rlm_sessions"} <= tables


def test_a_result_with_nul_and_lone_surrogates_comes_back_as_it_went(database: PostgresStore) -> None:
    store = runs(database)
    text = "a\x00b\ud800c é"
    store.started(RUN, "alice", ARGUMENTS)
    store.ended(RUN, "alice", "done", {"content": [{"type": "text", "text": text}]})
    store.flush()
    found = store.find("alice", RUN)
    store.close()
    assert found is not None and found.state == "done" and found.result == {"content": [{"type": "text", "text": text}]}


def test_another_principal_finds_nothing_and_a_hand_edited_row_is_unknown(
    store_url: str, database: PostgresStore
) -> None:
    store = runs(database)
    store.started(RUN, "alice", ARGUMENTS)
    store.flush()
    assert store.find("mallory", RUN) is None
    with psycopg.connect(store_url, autocommit=True) as connection:
        connection.execute("UPDATE rlm_runs SET arguments = '{\"rm -rf\": 1}'::json WHERE id = %s", (RUN,))
    assert store.find("alice", RUN) is None
    store.close()


def test_a_result_over_the_bound_is_kept_as_a_failure_that_says_what_to_do(database: PostgresStore) -> None:
    store = SharedRunStore(database, 16, 3600.0, replica(0.3), max_record_bytes=1 << 20)
    store.started(RUN, "alice", ARGUMENTS)
    store.ended(RUN, "alice", "done", {"content": [{"type": "text", "text": "x" * (2 << 20)}]})
    store.flush()
    found = store.find("alice", RUN)
    store.close()
    assert found is not None and found.state == "failed" and found.result is None
    assert found.error is not None and "call rlm_query again with the same arguments" in found.error


def test_two_replicas_claiming_one_lost_run_at_once_one_gets_it(database: PostgresStore, store_url: str) -> None:
    dead = runs(database)
    dead.started(RUN, "alice", ARGUMENTS)
    dead.flush()
    dead._writer.shutdown()  # it dies: nobody renews its lease
    dead.replica.close()
    time.sleep(0.5)
    assert runs(database).find("alice", RUN).lost  # type: ignore[union-attr]
    others = [SharedRunStore(PostgresStore(store_url), 16, 3600.0, replica(5.0)) for _ in range(4)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        claimed = list(pool.map(lambda store: store.claim(RUN), others))
    for store in others:
        store.close()
    assert sorted(claimed) == [False, False, False, True]


def test_a_run_cancelled_by_another_replica_is_stopped_at_the_next_renewal(database: PostgresStore) -> None:
    here, there = runs(database), runs(database)
    stopped: list[float] = []
    here.started(RUN, "alice", ARGUMENTS)
    here.hold(RUN, lambda: stopped.append(time.monotonic()))
    here.flush()
    assert not there.cancel("mallory", RUN)  # not hers
    began = time.monotonic()
    assert there.cancel("alice", RUN)
    deadline = time.monotonic() + 5
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.02)
    here.ended(RUN, "alice", "done", {"content": []})  # its end after the cancel leaves it cancelled
    here.flush()
    found = there.find("alice", RUN)
    here.close()
    there.close()
    assert stopped and stopped[0] - began < 0.5
    assert found is not None and found.state == "cancelled"


def test_a_session_is_refused_elsewhere_while_its_lease_holds_and_taken_over_after(database: PostgresStore) -> None:
    a = SharedSessionStore(database, replica(0.6))
    b = SharedSessionStore(database, replica(0.6))
    turn = {"query": "q", "paths": None, "text": "t", "output_schema": None}
    assert a.claim("alice", "notes", {"model": "m"}) == []
    a.record("key", "alice", "notes", {"model": "m"}, [turn])
    assert b.claim("bob", "notes", {"model": "m"}) == []  # another principal's session of that name
    with pytest.raises(SessionElsewhere) as refused:
        b.claim("alice", "notes", {"model": "m"})
    assert a.replica.id in str(refused.value) and "sticky routing" in str(refused.value)
    a.replica.close()  # A dies
    time.sleep(1.0)
    assert b.claim("alice", "notes", {"model": "other"}) == []  # other options: it starts empty
    b.record("key", "alice", "notes", {"model": "m"}, [turn])
    b.replica.close()
    time.sleep(1.0)
    assert a.claim("alice", "notes", {"model": "m"}) == [turn]


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "1e9"])
def test_a_bad_lease_is_one_line_naming_the_variable(value: str, tmp_path: Path, store_url: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{LEASE_VARIABLE}="):
        Lease.from_environment({LEASE_VARIABLE: value})
    command = [sys.executable, "-m", "rlm_adapters.mcp_server", "--http", "--port", "0", "--token", "t" * 16]
    command += ["--store", store_url, "--root", str(tmp_path), "--model", "gpt-x"]
    env = {"PATH": "/usr/bin:/bin", LEASE_VARIABLE: value, "HOME": str(tmp_path)}
    env |= {name: os.environ[name] for name in ("PYTHONPATH",) if name in os.environ}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    lines = [line for line in done.stderr.splitlines() if line.startswith("rlm-mcp: ") and "process list" not in line]
    assert done.returncode == 2 and len(lines) == 1 and LEASE_VARIABLE in lines[0], done.stderr


def test_runs_go_to_the_store_over_http_only(store_url: str, tmp_path: Path) -> None:
    """Over stdio every user's principal is ``local``, the same on every machine naming the store."""
    flags = ["--store", store_url, "--root", str(tmp_path), "--model", "gpt-x"]
    over_stdio = run_book(parse_config(flags))
    book = run_book(parse_config([*flags, "--http", "--token", "t" * 16]))
    try:
        assert over_stdio.store is None
        assert isinstance(book.store, SharedRunStore) and book.store.replica.id.count(":") == 2
    finally:
        if book.store is not None:
            book.store.close()


def _lost_run(database: PostgresStore) -> str:
    """A run whose replica died right after starting it; that replica's id."""
    dead = runs(database)
    dead.started(RUN, "alice", ARGUMENTS)
    dead.flush()
    dead._writer.shutdown()
    dead.replica.close()
    time.sleep(0.5)
    return dead.replica.id


def test_a_lost_run_is_taken_over_once_by_the_first_reader_and_a_cancel_does_not_start_it(
    database: PostgresStore,
) -> None:
    dead = _lost_run(database)
    started: list[Mapping[str, Any]] = []

    def resume(arguments: Mapping[str, Any]) -> Work:
        started.append(arguments)

        async def work(run: Run) -> CallToolResult:
            return CallToolResult(content=[TextContent(type="text", text="again")])

        return work

    async def cancelled_by_a_reader() -> tuple[Run, bool]:
        book = RunBook(store=runs(database))
        run = await book.find("alice", RUN, resume, take_over=False)
        lost = run.lost and run.status().message.startswith(f"lost: its replica {dead} stopped renewing")
        await book.cancel(run)
        await book.aclose()
        return run, lost

    run, lost = asyncio.run(cancelled_by_a_reader())
    assert lost and run.cancelled and started == []
    assert runs(database).find("alice", RUN).state == "cancelled"  # type: ignore[union-attr]


def test_a_lost_run_asked_for_runs_again_here_saying_so(database: PostgresStore) -> None:
    dead = _lost_run(database)

    async def work(run: Run) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="again")])

    async def asked() -> tuple[str, CallToolResult]:
        store = runs(database)
        book = RunBook(store=store)
        run = await book.find("alice", RUN, lambda arguments: work)
        message = run.status().message
        await book.wait(run, 10)
        result = book.outcome(run)
        assert isinstance(result, CallToolResult)
        await book.aclose()
        return message, result

    message, result = asyncio.run(asked())
    assert message.startswith(f"run again on this replica after replica {dead} was lost")
    found = runs(database).find("alice", RUN)
    assert found is not None and found.state == "done" and found.result == result.model_dump(mode="json", by_alias=True)


def test_a_lost_replicas_session_idle_too_long_is_dropped_and_a_held_one_kept(
    store_url: str, database: PostgresStore
) -> None:
    turn = {"query": "q", "paths": None, "text": "t", "output_schema": None}
    dead = SharedSessionStore(database, replica(0.3), idle_seconds=0.5)
    dead.record("key", "alice", "gone", {}, [turn])
    dead.replica.close()
    alive = SharedSessionStore(database, replica(0.3), idle_seconds=0.5)
    alive.record("key", "alice", "kept", {}, [turn])
    time.sleep(1.5)  # both idle past 0.5 s; only the live replica renews its lease
    with psycopg.connect(store_url) as connection:
        names = [row[0] for row in connection.execute("SELECT name FROM rlm_sessions ORDER BY name")]
    alive.replica.close()
    assert names == ["kept"]


def test_a_replica_stopping_gives_up_its_runs_and_sessions_at_once(database: PostgresStore) -> None:
    stopping = runs(database, lease=60.0)
    sessions = SharedSessionStore(database, stopping.replica)
    stopping.started(RUN, "alice", ARGUMENTS)
    stopping.hold(RUN, lambda: None)
    stopping.flush()
    sessions.record("key", "alice", "notes", {}, [])
    other = runs(database, lease=60.0)
    assert not other.find("alice", RUN).lost  # type: ignore[union-attr]
    stopping.close()  # a server stopping: its runs are unfinished, its sessions kept for whoever comes next
    assert other.find("alice", RUN).lost  # type: ignore[union-attr]
    assert other.claim(RUN)
    assert SharedSessionStore(database, other.replica).claim("alice", "notes", {}) == []
