"""With ``--cache``, background runs outlive their server: over stdio a client disconnects mid-run (its server
ends), and the next client's server fetches the run by id, running it again from the cache (no call that came
back is paid twice), or returns its result as it was."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult

from rlm_adapters.mcp_server.runs.store import RunStore, runs_path
from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer, second_batch
from tests.mcp_server.conftest import server_env

QUESTION = {"query": "Add up the magic numbers.", "paths": ["notes.txt"]}


@pytest.fixture
def ledger(workspace: Path) -> Iterator[LedgerServer]:
    """The fake server with a ledger, answering `BATCHES` over ``notes.txt`` (written in the workspace)."""
    (workspace / "notes.txt").write_text("a long document\n" * 100, encoding="utf-8")
    with LedgerServer(root=BATCHES, latency=0.3) as running:
        yield running


def stdio(workspace: Path, env: dict[str, str], cache: Path) -> StdioServerParameters:
    args = ["-m", "rlm_adapters.mcp_server", "--root", str(workspace), "--sandbox", "local", "--cache", str(cache)]
    return StdioServerParameters(command=sys.executable, args=args, env=env, cwd=str(workspace))


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result.content
    return result.structured_content


@pytest.mark.slow
async def test_stdio_a_run_cut_off_by_its_clients_exit_is_fetched_by_the_next_client(
    workspace: Path, ledger: LedgerServer, tmp_path: Path
) -> None:
    env, cache = server_env(ledger, tmp_path / "logs"), tmp_path / "calls.sqlite"
    in_second_batch = ledger.watch(second_batch)
    async with Client(stdio(workspace, env, cache)) as first:
        run_id = structured(await first.call_tool("rlm_query", {**QUESTION, "background": True}))["run_id"]
        assert await asyncio.to_thread(in_second_batch.wait, 120), "the run did not reach its second batch"
        answered = list(ledger.answered)
    # The client left: its server stopped the run. The next client's server fetches it by id.
    assert len(answered) == 8
    record = json.loads((runs_path(cache) / f"{run_id}.w.json").read_text())
    assert record["state"] == "working" and record["principal"] == "local"
    ledger.forget()
    async with Client(stdio(workspace, env, cache)) as second:
        fetched = await second.call_tool("rlm_query", {"run_id": run_id, "wait": 120})
    assert structured(fetched)["answer"] == BATCHES_ANSWER
    assert not set(ledger.arrived) & set(answered), "a call that had come back was paid again"
    unpriced = "not paid again (cost unknown: no price for 'leaf-model', 'root-model')"  # the fakes have none
    assert structured(fetched)["resumed"] == f"resumed: 8 of 15 model calls from {cache.name}, {unpriced}"

    # Finished now: a third server returns the result as it was, asking the model nothing.
    ledger.forget()
    async with Client(stdio(workspace, env, cache)) as third:
        again = await third.call_tool("rlm_query", {"run_id": run_id})
    assert again.content == fetched.content and ledger.arrived == []
    assert structured(again) == structured(fetched)


@pytest.mark.slow
async def test_stdio_a_cancelled_run_stays_cancelled_and_forged_ids_stay_unknown(
    workspace: Path, ledger: LedgerServer, tmp_path: Path
) -> None:
    env, cache = server_env(ledger, tmp_path / "logs"), tmp_path / "calls.sqlite"
    async with Client(stdio(workspace, env, cache)) as first:
        run_id = structured(await first.call_tool("rlm_query", {**QUESTION, "background": True}))["run_id"]
        cancelled = await first.call_tool("rlm_query", {"run_id": run_id, "cancel": True})
        assert structured(cancelled)["status"] == "cancelled"
    ledger.forget()
    async with Client(stdio(workspace, env, cache)) as second:
        later = await second.call_tool("rlm_query", {"run_id": run_id, "wait": 5})
        forged = await second.call_tool("rlm_query", {"run_id": "Z" * 22})
    assert structured(later)["status"] == "cancelled"
    assert ledger.arrived == [], "a cancelled run is not run again"
    assert forged.is_error and "names no run you can reach" in forged.content[0].text  # type: ignore[union-attr]


def test_another_principals_run_is_not_in_the_store(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "calls.sqlite.runs", keep_results=64, keep_seconds=3600)
    store.started("A" * 22, "bearer:alice", {"query": "q", "text": "x"})
    store.close()
    again = RunStore(tmp_path / "calls.sqlite.runs", keep_results=64, keep_seconds=3600)
    assert again.find("bearer:mallory", "A" * 22) is None
    found = again.find("bearer:alice", "A" * 22)
    assert found is not None and found.state == "working" and found.arguments["query"] == "q"


def test_ended_runs_are_kept_as_few_and_as_long_as_the_limits_say(tmp_path: Path) -> None:
    now = [1000.0]
    store = RunStore(tmp_path / "runs", keep_results=2, keep_seconds=60, clock=lambda: now[0])
    for index in range(4):
        store.started(f"{index}" * 22, "local", {"query": "q"})
        store.flush()
        now[0] += 1
        store.ended(f"{index}" * 22, "local", "done", result={"content": []})
        store.flush()
    assert [store.find("local", f"{i}" * 22) is not None for i in range(4)] == [False, False, True, True]
    now[0] += 61
    assert store.find("local", "3" * 22) is None
    store.close()


@pytest.mark.parametrize(
    "content",
    [
        "[]",
        '{"format": "rlm-mcp-run", "version": 2, "principal": "local"}',
        '{"format": "rlm-mcp-run", "version": 2, "principal": "local", "arguments": {"rm": 1}}',
    ],
)
def test_a_record_that_is_not_ours_is_unknown_and_left_as_it_is(tmp_path: Path, content: str) -> None:
    path = tmp_path / "runs"
    RunStore(path, keep_results=64, keep_seconds=3600).close()
    record = path / ("A" * 22 + ".e.json")
    record.write_text(content)
    record.chmod(0o600)
    store = RunStore(path, keep_results=64, keep_seconds=3600)
    assert store.find("local", "A" * 22) is None
    store.close()
    assert record.read_text() == content


def test_two_servers_sharing_a_cache_keep_each_others_runs(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite.runs"
    one, two = RunStore(path, 64, 3600), RunStore(path, 64, 3600)
    one.started("A" * 22, "local", {"query": "a"})
    two.started("B" * 22, "local", {"query": "b"})
    one.ended("A" * 22, "local", "done", result={"content": []})
    one.close()
    two.close()
    later = RunStore(path, 64, 3600)
    a, b = later.find("local", "A" * 22), later.find("local", "B" * 22)
    assert a is not None and a.state == "done" and b is not None and b.state == "working"
    later.close()
