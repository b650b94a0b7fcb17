"""MCP tasks over the real transports (protocol 2025-11-25, the SDK's client): over stdio a task is created,
polled to completed and fetched, and a cancelled one's sandbox closes within 2 s; over HTTP it belongs to
whoever holds the token (another MCP session with it lists and fetches the result)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError

from rlm_adapters.mcp_server.runs.tasks import RELATED_TASK
from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import server_env
from tests.mcp_server.exits import cancelled_within_2_s
from tests.mcp_server.task_client import call_as_task, cancel_task, get_task, list_tasks, task_result
from tests.mcp_server.test_cancel import HangingRoot, _until, descendants
from tests.mcp_server.test_http import TOKEN, connect, served
from tests.mcp_server.test_runs import answering
from tests.mcp_server.test_runs_transports import ANSWER, needs_proc, text_of
from tests.mcp_server.test_stdio import _params

__all__ = ["answering"]  # a fixture, used by name
ARGUMENTS = {"query": "magic?", "paths": ["docs/a.md"]}


async def polled_to_the_end(session: ClientSession, task_id: str) -> str:
    """Poll ``tasks/get`` as a client does, at the interval the server asks for; the final status."""
    while (task := await get_task(session, task_id)).status == "working":
        await asyncio.sleep((task.poll_interval or 1000) / 1000)
    return task.status


@pytest.mark.slow
async def test_stdio_a_task_is_polled_to_completed_and_its_result_is_a_plain_calls(
    workspace: Path, answering: FakeOpenAIServer, tmp_path: Path
) -> None:
    env = server_env(answering, tmp_path / "logs")
    async with Client(_params(workspace, env, "--sandbox", "local"), mode="legacy") as client:
        assert client.server_capabilities.tasks is not None
        created = await call_as_task(client.session, ARGUMENTS, {"ttl": 120_000})
        assert created.task.status == "working" and created.task.ttl == 120_000
        assert await polled_to_the_end(client.session, created.task.task_id) == "completed"
        result = await task_result(client.session, created.task.task_id)
        fetched = await client.call_tool("rlm_query", {"run_id": created.task.task_id})
        plain = await client.call_tool("rlm_query", ARGUMENTS)
    assert text_of(result) == text_of(plain) == ANSWER
    assert result.meta == {RELATED_TASK: {"taskId": created.task.task_id}}
    assert result.model_copy(update={"meta": None}) == fetched


@pytest.mark.slow
async def test_http_a_task_belongs_to_its_token_across_mcp_sessions(
    workspace: Path, answering: FakeOpenAIServer, tmp_path: Path
) -> None:
    """A checked token is one principal; without one each MCP session is its own (`tests/security/
    test_mcp_principals.py`), and a wrong token is refused before any MCP method (`test_http`)."""
    with served(workspace, server_env(answering, tmp_path / "logs"), "--token", TOKEN) as (_process, url):
        async with connect(url, mode="legacy", token=TOKEN) as alice:
            task_id = (await call_as_task(alice.client.session, ARGUMENTS)).task.task_id
        async with connect(url, mode="legacy", token=TOKEN) as again:
            # Alice's new MCP session (the first one ended) reaches it.
            assert [t.task_id for t in (await list_tasks(again.client.session)).tasks] == [task_id]
            assert await polled_to_the_end(again.client.session, task_id) == "completed"
            result = await task_result(again.client.session, task_id)
            plain = await again.call(**ARGUMENTS)
            with pytest.raises(MCPError) as refused:
                await get_task(again.client.session, "B" * 22)
    assert (
        refused.value.error.message
        == f"taskId {'B' * 22!r} names no task you can reach (unknown, expired, or not yours)"
    )
    assert text_of(result) == text_of(plain) == ANSWER


@needs_proc
@pytest.mark.slow
async def test_stdio_tasks_cancel_closes_the_sandbox_within_2_s(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = HangingRoot(fake_server)
    env = server_env(fake_server, tmp_path / "logs")
    async with Client(_params(workspace, env, "--sandbox", "subprocess"), mode="legacy") as client:
        before = descendants()
        task_id = (await call_as_task(client.session, {"query": "hang", "text": "x"})).task.task_id
        await _until(lambda: fake_server.counters.in_flight >= 3, timeout=60)
        workers = descendants() - before
        assert workers, "the sandbox worker runs below the server process"
        cancelled = await cancelled_within_2_s(cancel_task(client.session, task_id), workers)
        assert cancelled.status == "cancelled"
        assert (await get_task(client.session, task_id)).status == "cancelled"
        with pytest.raises(MCPError, match="was cancelled"):
            await task_result(client.session, task_id)
