"""Issue 35, defect 1: every HTTP client without a token was one principal (``"http"``).

With the real SDK client over streamable HTTP against ``rlm-mcp --http`` (no ``--token``, loopback): client B,
another MCP session, listed client A's task, read A's answer through ``tasks/result`` and ``rlm_query(run_id=)``,
cancelled A's task, and after a restart with ``--cache`` drove A's ``session=`` REPL. Without a token the
principal is the MCP session; an ``Authorization`` header nobody checked ties nothing together.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from rlm_adapters.errors import QueryError
from rlm_adapters.mcp_server.runs.background import RunBook, RunLimits
from rlm_adapters.mcp_server.server import run_book
from rlm_adapters.mcp_server.sessions.store import store_path
from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import server_env, workspace
from tests.mcp_server.exits import exited
from tests.mcp_server.task_client import call_as_task, cancel_task, get_task, list_tasks, task_result
from tests.mcp_server.test_cancel import HangingRoot, _until, descendants
from tests.mcp_server.test_http import TOKEN, connect, served, start_http_server, stop
from tests.mcp_server.test_runs_transports import needs_proc
from tests.mcp_server.test_session_restart import root as remembering_root

__all__ = ["workspace"]  # a fixture, used by name
UNKNOWN_TASK = "taskId <id> names no task you can reach (unknown, expired, or not yours)"
SECRET = "A-INLINE-SECRET-7731"


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def refusals(session: Any, task_id: str) -> set[str]:
    """What ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` of `task_id` answer (each must refuse)."""
    answers = set()
    for send in (get_task, task_result, cancel_task):
        with pytest.raises(MCPError) as refused:
            await send(session, task_id)
        answers.add(refused.value.error.message.replace(repr(task_id), "<id>"))
    return answers


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer same-for-everyone"}])
async def test_http_without_a_token_b_cannot_list_read_or_cancel_as_task_or_run(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path, headers: dict[str, str]
) -> None:
    fake_server.root = HangingRoot(fake_server)
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--sandbox", "local") as (_process, url):
        async with (
            connect(url, mode="legacy", headers=headers) as alice,
            connect(url, mode="legacy", headers=headers) as bob,
        ):
            task_id = (await call_as_task(alice.client.session, {"query": "hang", "text": SECRET})).task.task_id
            started = await alice.call(query="hang", text=SECRET, background=True)
            assert not started.is_error, text_of(started)
            run_id = started.structured_content["run_id"]

            assert (await list_tasks(bob.client.session)).tasks == []
            assert await refusals(bob.client.session, task_id) == {UNKNOWN_TASK}
            assert await refusals(bob.client.session, run_id) == {UNKNOWN_TASK}
            for reached in (task_id, run_id):
                for arguments in ({"run_id": reached}, {"run_id": reached, "cancel": True}):
                    refused = await bob.call(**arguments)
                    assert refused.is_error and "names no run you can reach" in text_of(refused)
                    assert SECRET not in text_of(refused)
            # Bob's tries changed nothing: Alice lists her task, both still work, and she cancels them.
            assert [t.task_id for t in (await list_tasks(alice.client.session)).tasks] == [task_id]
            assert (await get_task(alice.client.session, task_id)).status == "working"
            status = await alice.call(run_id=run_id)
            assert status.structured_content["status"] == "running"
            assert (await cancel_task(alice.client.session, task_id)).status == "cancelled"
            cancelled = await alice.call(run_id=run_id, cancel=True)
            assert cancelled.structured_content["status"] == "cancelled"


@needs_proc
async def test_http_without_a_token_a_run_ends_with_its_mcp_session(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Nobody could fetch it again, so it is cancelled (its sandbox closed) and forgotten."""
    fake_server.root = HangingRoot(fake_server)
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--sandbox", "subprocess") as (process, url):
        async with connect(url, mode="legacy") as alice:
            run_id = (await alice.call(query="hang", text="x", background=True)).structured_content["run_id"]
            await _until(lambda: fake_server.counters.in_flight >= 3, timeout=60)
            workers = descendants(process.pid)
            assert workers, "the sandbox worker runs below the server"
        # Alice's DELETE ended her MCP session: the server stops the run, and its worker exits.
        assert not await exited(workers, 60), "the run outlived the only client that could reach it"
        async with connect(url, mode="legacy") as later:
            refused = await later.call(run_id=run_id)
    assert refused.is_error and "names no run you can reach" in text_of(refused)


async def test_http_without_a_token_a_session_less_request_cannot_start_a_run_nobody_could_fetch(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    with served(workspace, server_env(fake_server, tmp_path / "logs"), "--sandbox", "local") as (_process, url):
        async with connect(url, mode="auto") as request:
            refused = await request.call(query="q", text="x", background=True)
    assert refused.is_error and "background=true needs a client the server knows again" in text_of(refused)
    assert fake_server.counters.requests == 0


@pytest.mark.slow
async def test_http_without_a_token_a_restored_session_is_handed_to_nobody(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """After a restart with ``--cache``, B named A's ``session=`` and drove A's REPL (its variables)."""
    fake_server.root = remembering_root
    env = server_env(fake_server, tmp_path / "logs")
    cache = tmp_path / "calls.sqlite"
    flags = ("--cache", str(cache), "--sandbox", "local")
    process, url = start_http_server(workspace, env, *flags)
    try:
        held = contextlib.AsyncExitStack()
        alice = await held.enter_async_context(connect(url, mode="legacy"))
        assert text_of(await alice.call(query="remember a number", text="x", session="s")) == "set"
        # The server stops while Alice's session is open (what a restart keeps, with a token).
        await asyncio.to_thread(stop, process)
        with contextlib.suppress(Exception):  # her MCP session cannot be ended: the server is gone
            await held.aclose()
    finally:
        if process.poll() is None:
            stop(process)
    sessions = store_path(cache)
    assert not sessions.exists() or json.loads(sessions.read_text())["sessions"] == []
    with served(workspace, env, *flags) as (_process, url):
        async with connect(url, mode="legacy") as bob, connect(url, mode="legacy") as alice_again:
            driven = await bob.call(query="what was it?", text="y", session="s")
            hers = await alice_again.call(query="what was it?", text="y", session="s")
    # The answer, before any note (Alice's same call replays Bob's from the cache, and says so).
    assert [text_of(r).split("\n\n", 1)[0] for r in (driven, hers)] == ["none", "none"]


async def test_http_with_a_token_its_holders_share_and_sessions_still_keep_their_own_repls(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """A checked token is one principal: another MCP session with it lists and fetches the task."""
    fake_server.root = HangingRoot(fake_server)
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--sandbox", "local", "--token", TOKEN) as (_process, url):
        async with connect(url, mode="legacy", token=TOKEN) as one, connect(url, mode="legacy", token=TOKEN) as two:
            task_id = (await call_as_task(one.client.session, {"query": "hang", "text": "x"})).task.task_id
            assert [t.task_id for t in (await list_tasks(two.client.session)).tasks] == [task_id]
            assert (await cancel_task(two.client.session, task_id)).status == "cancelled"


async def test_http_a_flood_of_runs_from_one_client_leaves_slots_for_the_others(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """With ``--max-client-runs`` as large as ``--max-runs``, one client took every slot (and, one principal
    for all, the next client was told the runs were its own)."""
    fake_server.root = HangingRoot(fake_server)
    env = server_env(fake_server, tmp_path / "logs")
    flags = ("--sandbox", "local", "--max-runs", "4", "--max-client-runs", "4")
    with served(workspace, env, *flags) as (_process, url):
        async with connect(url, mode="legacy") as alice, connect(url, mode="legacy") as bob:
            hers = [await alice.call(query="hang", text="x", background=True) for _ in range(10)]
            his = [await bob.call(query="hang", text="x", background=True) for _ in range(3)]
    assert [r.is_error for r in hers] == [False] * 2 + [True] * 8
    assert {text_of(r) for r in hers[2:]} == {
        "Error executing tool rlm_query: 2 background runs of yours are working, your share of this server's "
        "--max-runs 4 (half, so that other clients keep theirs): wait for one with run_id=..., wait=..., or "
        "cancel one"
    }
    assert [r.is_error for r in his] == [False, False, True]


def test_a_shared_run_book_gives_each_principal_its_share_and_a_private_one_does_not() -> None:
    async def main() -> None:
        never = asyncio.Event()

        async def work(_run: Any) -> Any:
            await never.wait()

        for shared, first in ((True, 8), (False, 16)):
            runs = RunBook(RunLimits(max_per_client=16, max_running=16), shared=shared)
            for owner in ("session:a", "session:b", "session:c"):
                for _ in range(100):
                    with contextlib.suppress(QueryError):
                        runs.start(owner, work)
                if owner == "session:a":
                    assert len(runs) == first
            assert len(runs) == 16  # the server's cap holds whoever asks
            await runs.aclose()
        assert RunLimits(max_per_client=4, max_running=1).share == 1  # a single slot is anyone's
        assert RunLimits(max_per_client=4, max_running=3).share == 2
        assert RunLimits(max_per_client=4, max_running=16).share == 4

    asyncio.run(main())


def test_the_server_shares_its_runs_only_over_http_without_a_token(tmp_path: Path) -> None:
    from rlm_adapters.mcp_server import parse_config

    def book(*flags: str) -> RunBook:
        return run_book(parse_config(["--root", str(tmp_path), *flags], environ={}))

    assert book("--http").shared
    assert not book("--http", "--token", TOKEN).shared and not book().shared
