"""Two real ``rlm-mcp --http --store URL`` replicas on one PostgreSQL store (issue 52): background runs, MCP tasks
and ``session=`` records are the store's, so either replica answers for a run or task the other started; a run
whose replica was killed is seen lost after its lease and run again on the other, paying only for the calls that
had not come back; a session's sandbox stays on its replica, and the other refuses it naming what to configure.

Leases are 1.5 s here (``RLM_LEASE_SECONDS``: renewed every 0.5 s), 15 s by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_types import CallToolResult

from rlm_adapters.testing import FakeOpenAIServer
from tests.killed import BATCHES, BATCHES_ANSWER, LedgerServer, second_batch
from tests.mcp_server.conftest import server_env
from tests.mcp_server.task_client import call_as_task, cancel_task, get_task, list_tasks, task_result
from tests.mcp_server.test_http import TOKEN, connect, start_http_server
from tests.mcp_server.test_keys import spent_calls
from tests.mcp_server.test_runs import answering
from tests.mcp_server.test_runs_transports import ANSWER, text_of
from tests.postgres import PASSWORD, PostgresServer

__all__ = ["answering"]  # a fixture, used by name
ARGUMENTS = {"query": "magic?", "paths": ["docs/a.md"]}
BATCH_ARGUMENTS = {"query": "Add up the magic numbers.", "text": "the first document."}
LEASE = 1.5

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


class Replica:
    """One ``rlm-mcp --http --store`` process: its URL, and what it wrote to stderr once stopped."""

    def __init__(self, workspace: Path, env: dict[str, str], store_url: str) -> None:
        self.process, self.url = start_http_server(
            workspace, env, "--store", store_url, "--token", TOKEN, own_group=True
        )
        self.log = ""

    def stop(self) -> str:
        if not self.log:
            if self.process.poll() is None:
                self.process.terminate()
            self.process.wait(10)
            assert self.process.stderr is not None
            self.log = self.process.stderr.read().decode(errors="replace")
        return self.log

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


@contextlib.contextmanager
def replicas(
    workspace: Path, fake: FakeOpenAIServer, store_url: str, logs: Path, lease: float = LEASE
) -> Iterator[list[Replica]]:
    env = server_env(fake, logs) | {"RLM_LEASE_SECONDS": str(lease)}
    started = [Replica(workspace, env, store_url), Replica(workspace, env, store_url)]
    try:
        yield started
    finally:
        for replica in started:
            replica.stop()
            print(replica.log[-4000:])  # shown when the test fails
        for replica in started:
            assert PASSWORD not in replica.log


async def call(url: str, **arguments: Any) -> CallToolResult:
    async with connect(url, mode="legacy", token=TOKEN) as connection:
        result: CallToolResult = await connection.call(**arguments)
        return result


async def until(check: Any, seconds: float = 30.0) -> Any:
    """Poll the async `check` (0.2 s apart) until it returns something true; that."""
    deadline = time.monotonic() + seconds
    while not (found := await check()):
        assert time.monotonic() < deadline, "gave up waiting"
        await asyncio.sleep(0.2)
    return found


async def test_a_task_started_on_one_replica_is_read_on_the_other(
    workspace: Path, answering: FakeOpenAIServer, store_url: str, tmp_path: Path
) -> None:
    with replicas(workspace, answering, store_url, tmp_path / "logs") as (a, b):
        async with connect(a.url, mode="legacy", token=TOKEN) as on_a:
            task_id = (await call_as_task(on_a.client.session, ARGUMENTS, {"ttl": 60_000})).task.task_id
        async with connect(b.url, mode="legacy", token=TOKEN) as on_b:
            seen = await get_task(on_b.client.session, task_id)
            assert seen.ttl == 60_000 and seen.status in ("working", "completed")
            listed = await list_tasks(on_b.client.session)
            assert [task.task_id for task in listed.tasks] == [task_id]
            result = await task_result(on_b.client.session, task_id)
            assert (await get_task(on_b.client.session, task_id)).status == "completed"
            fetched = await on_b.call(run_id=task_id)
        requests = answering.counters.requests
    assert text_of(result) == text_of(fetched) == ANSWER
    assert requests == 2, "B ran the task again instead of reading A's result"


async def test_a_run_killed_with_its_replica_is_lost_then_run_again_on_the_other_paying_only_what_was_missing(
    workspace: Path, store_url: str, tmp_path: Path
) -> None:
    with LedgerServer(root=BATCHES, latency=0.05) as ledger, replicas(workspace, ledger, store_url, tmp_path) as ab:
        a, b = ab
        seen = ledger.watch(second_batch)
        async with connect(a.url, mode="legacy", token=TOKEN) as on_a:
            task_id = (await call_as_task(on_a.client.session, BATCH_ARGUMENTS)).task.task_id
            assert await asyncio.to_thread(seen.wait, 60)
            with ledger._changed:
                a.kill()
                answered = list(ledger.answered)
            ledger.forget()
        assert len(answered) >= 7  # the first root turn and its six sub-calls came back before the kill
        async with connect(b.url, mode="legacy", token=TOKEN) as on_b:

            async def lost() -> str | None:
                [task] = (await list_tasks(on_b.client.session)).tasks
                return task.status_message if "lost" in (task.status_message or "") else None

            message = await until(lost, 10 * LEASE)
            assert task_id in [t.task_id for t in (await list_tasks(on_b.client.session)).tasks]
            resumed = (await on_b.call(run_id=task_id)).structured_content
            result = await on_b.call(run_id=task_id, wait=120)
            status = await get_task(on_b.client.session, task_id)
    assert f":{a.process.pid}:" in message  # the replica that died, named host:pid:random
    assert "stopped renewing its lease" in message
    assert resumed is not None and resumed["status"] == "running"
    assert resumed["message"].startswith(f"run again on this replica after replica {message.split()[3]} was lost")
    assert BATCHES_ANSWER in text_of(result), text_of(result)
    assert status.status == "completed"
    paid_again = [key for key in ledger.arrived if key in answered]
    assert paid_again == [], f"B paid again for {len(paid_again)} calls A had got back"
    assert 0 < len(ledger.arrived) <= 15 - len(answered) + 6  # at most the batch in flight at the kill, again
    assert "run again on replica" in b.stop()


async def test_a_session_on_one_replica_is_refused_on_the_other_naming_sticky_routing(
    workspace: Path, answering: FakeOpenAIServer, store_url: str, tmp_path: Path
) -> None:
    with replicas(workspace, answering, store_url, tmp_path / "logs") as (a, b):
        async with connect(a.url, mode="legacy", token=TOKEN) as on_a:
            first = await on_a.call(**ARGUMENTS, session="notes")
            refused = await call(b.url, **ARGUMENTS, session="notes")
            again = await on_a.call(**ARGUMENTS, session="notes")
            other = await call(b.url, **ARGUMENTS, session="other-name")

        async def opened_on_b() -> bool:  # A's client ended its MCP session: the session closed, its record went
            return not (await call(b.url, **ARGUMENTS, session="notes")).is_error

        await until(opened_on_b, 10.0)
    assert not first.is_error and not again.is_error and not other.is_error
    assert refused.is_error
    line = text_of(refused)
    assert "session='notes' is open on replica " in line and "sticky routing on the Mcp-Session-Id header" in line
    assert len(line.splitlines()) == 1


async def test_a_cancel_on_the_other_replica_stops_the_run_where_it_works(
    workspace: Path, answering: FakeOpenAIServer, store_url: str, tmp_path: Path
) -> None:
    answering.root_latency = 30.0  # the run is still working when the cancel comes
    with replicas(workspace, answering, store_url, tmp_path / "logs") as (a, b):
        started = await call(a.url, **ARGUMENTS, background=True)
        run_id = started.structured_content["run_id"]
        working = await call(b.url, run_id=run_id)
        cancelled = await call(b.url, run_id=run_id, cancel=True)

        async def stopped_on_a() -> bool:
            status = (await call(a.url, run_id=run_id)).structured_content
            return status is not None and status.get("status") == "cancelled"

        began = time.monotonic()
        await until(stopped_on_a, 10 * LEASE)
        took = time.monotonic() - began
    assert working.structured_content["message"].startswith("working on replica ")
    assert cancelled.structured_content["status"] == "cancelled"
    assert took < 3 * LEASE  # stopped at A's next renewal, not when the model answered (30 s)


async def test_a_cancelled_task_on_the_other_replica_reads_cancelled(
    workspace: Path, answering: FakeOpenAIServer, store_url: str, tmp_path: Path
) -> None:
    answering.root_latency = 30.0
    with replicas(workspace, answering, store_url, tmp_path / "logs") as (a, b):
        async with connect(a.url, mode="legacy", token=TOKEN) as on_a:
            task_id = (await call_as_task(on_a.client.session, ARGUMENTS)).task.task_id
        async with connect(b.url, mode="legacy", token=TOKEN) as on_b:
            cancelled = await cancel_task(on_b.client.session, task_id)
            assert cancelled.status == "cancelled"
        async with connect(a.url, mode="legacy", token=TOKEN) as on_a:

            async def cancelled_on_a() -> bool:
                return (await get_task(on_a.client.session, task_id)).status == "cancelled"

            await until(cancelled_on_a, 10 * LEASE)


async def test_the_store_restarting_mid_run_costs_no_answer_already_produced(
    workspace: Path, answering: FakeOpenAIServer, postgres: PostgresServer, store_url: str, tmp_path: Path
) -> None:
    answering.root_latency = 2.0
    with replicas(workspace, answering, store_url, tmp_path / "logs") as (a, b):
        async with connect(a.url, mode="legacy", token=TOKEN) as on_a:
            task_id = (await call_as_task(on_a.client.session, ARGUMENTS)).task.task_id
            await asyncio.sleep(0.3)  # its start is in the store
            await asyncio.to_thread(postgres.stop)
            try:
                # The run ends while the store is down: A answers from memory.
                on_a_result = await task_result(on_a.client.session, task_id)
                await asyncio.sleep(2 * LEASE)  # its end met the store down
            finally:
                await asyncio.to_thread(postgres.start)
        requests = answering.counters.requests
        async with connect(b.url, mode="legacy", token=TOKEN) as on_b:

            async def completed() -> bool:
                with contextlib.suppress(Exception):  # B's store rests 10 s after it failed
                    tasks = (await list_tasks(on_b.client.session)).tasks
                    return [t.status for t in tasks] == ["completed"]
                return False

            await until(completed, 60)
            on_b_result = await task_result(on_b.client.session, task_id)
        log = a.stop()
    assert text_of(on_a_result) == text_of(on_b_result) == ANSWER
    assert answering.counters.requests == requests, "B ran the task again"
    assert log.count("is kept in memory and written when the store is back") == 1
    assert "is written" in log


async def test_a_session_whose_replica_died_is_taken_over_its_calls_replaying_from_the_store(
    workspace: Path, answering: FakeOpenAIServer, store_url: str, tmp_path: Path
) -> None:
    # A lease long enough that B's first call surely meets it unlapsed on a loaded machine (1.5 s did not, once).
    lease = 4 * LEASE
    with replicas(workspace, answering, store_url, tmp_path / "logs", lease=lease) as (a, b):
        # The client stays connected to A until A dies: a client ending its MCP session closes its sessions
        # for good (their records go), and A could have done that before the kill.
        async with connect(a.url, mode="legacy", token=TOKEN) as on_a:
            first = await on_a.call(**ARGUMENTS, session="notes")
            a.kill()
        held = await call(b.url, **ARGUMENTS, session="notes")  # A's lease has not lapsed yet
        await asyncio.sleep(2 * lease)
        before = answering.counters.requests
        taken = await call(b.url, **ARGUMENTS, session="notes")
        paid = answering.counters.requests - before
    assert not first.is_error and not taken.is_error, text_of(taken)
    assert held.is_error and f":{a.process.pid}:" in text_of(held)
    # One request: the new call's root turn, which sees the session's history (a session started empty would
    # have sent A's first request again, from the store, for nothing); A's call, run again in B's new REPL,
    # and the new leaf call (the same question as A's) replayed from the store.
    assert paid == 1


async def test_a_replica_stopped_on_a_signal_hands_its_run_over_at_once(
    workspace: Path, answering: FakeOpenAIServer, store_url: str, tmp_path: Path
) -> None:
    answering.root_latency = 30.0
    with replicas(workspace, answering, store_url, tmp_path / "logs", lease=600.0) as (a, b):
        started = await call(a.url, **ARGUMENTS, background=True)
        run_id = started.structured_content["run_id"]
        a.stop()  # SIGTERM: a rolling deploy
        answering.root_latency = 0.0
        resumed = (await call(b.url, run_id=run_id)).structured_content
        result = await call(b.url, run_id=run_id, wait=60)
    assert resumed is not None and resumed["message"].startswith("run again on this replica after replica ")
    assert text_of(result) == ANSWER


async def test_a_keys_run_lost_with_its_replica_is_run_again_on_the_other_and_still_paid_by_that_key(
    workspace: Path, store_url: str, tmp_path: Path, keys: Any
) -> None:
    """The run belongs to ``key:alice`` on either replica, and what B pays to finish it is alice's spend."""
    alice = keys.add("alice")
    with LedgerServer(root=BATCHES, latency=0.05) as ledger, replicas(workspace, ledger, store_url, tmp_path) as ab:
        a, b = ab
        seen = ledger.watch(second_batch)
        async with connect(a.url, mode="legacy", token=alice) as on_a:
            started = await on_a.call(**BATCH_ARGUMENTS, background=True)
            assert started.structured_content is not None, text_of(started)
            run_id = str(started.structured_content["run_id"])
            assert await asyncio.to_thread(seen.wait, 60)
            with ledger._changed:
                a.kill()
            ledger.forget()
        before = spent_calls(store_url, "alice")
        assert before > 0, "A recorded alice's calls as they came back"
        await asyncio.sleep(3 * LEASE)  # A's lease lapses
        async with connect(b.url, mode="legacy", token=TOKEN) as stranger:  # the token is another principal
            assert (await stranger.call(run_id=run_id)).is_error
        async with connect(b.url, mode="legacy", token=alice) as on_b:
            result = await on_b.call(run_id=run_id, wait=120)
    assert BATCHES_ANSWER in text_of(result), text_of(result)
    assert ledger.arrived, "B finished the run"
    # Each call B paid for, under alice. A request A had sent before the kill may reach the fake server after the
    # ledger was cleared: it is the same request as one B sends (A never got its reply), so it counts once.
    assert spent_calls(store_url, "alice") - before == len(set(ledger.arrived))
