"""MCP tasks in process (protocol 2025-11-25, the SDK's client): a task-augmented ``rlm_query`` is a background
run, polled, fetched, cancelled; capabilities are advertised; and what a hostile client tries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequest, CallToolRequestParams, CreateTaskResult, TaskMetadata
from pydantic import ValidationError

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.runs.background import RunBook, RunLimits
from rlm_adapters.mcp_server.runs.tasks import RELATED_TASK
from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import MakeConfig
from tests.mcp_server.exits import cancelled_within_2_s
from tests.mcp_server.task_client import call_as_task, cancel_task, get_task, list_tasks, task_result
from tests.mcp_server.test_cancel import HangingRoot, _until, run_processes
from tests.mcp_server.test_runs import answering, same_call, text_of

__all__ = ["answering"]  # a fixture, used by name
ARGUMENTS: dict[str, Any] = {"query": "magic?", "paths": ["docs/a.md"]}
ANSWER = "4242\n\nSources:\n- docs/a.md:1"


@pytest.fixture
async def runs() -> AsyncIterator[RunBook]:
    book = RunBook(RunLimits(max_per_client=4, max_running=16, keep_seconds=600))
    yield book
    await book.aclose()


async def test_capabilities_and_task_support_are_advertised_on_2025_11_25_only(
    make_config: MakeConfig, runs: RunBook
) -> None:
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        tasks = client.server_capabilities.tasks
        assert tasks is not None and tasks.list is not None and tasks.cancel is not None
        assert tasks.requests is not None and tasks.requests.tools is not None
        assert tasks.requests.tools.call is not None
        (tool,) = (await client.list_tools()).tools
        assert tool.execution is not None and tool.execution.task_support == "optional"
    async with Client(server) as modern:  # 2026-07-28: tasks left the core protocol
        assert modern.server_capabilities.tasks is None
        (tool,) = (await modern.list_tools()).tools
        assert tool.execution is None


async def test_the_sdk_client_refuses_a_create_task_result(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    """Why `task_client.call_as_task` sends through the dispatcher: the SDK's `send_request` validates a
    2025-11-25 ``tools/call`` result as a ``CallToolResult`` (which the spec's ``CreateTaskResult`` is not)."""
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        params = CallToolRequestParams(name="rlm_query", arguments=ARGUMENTS, task=TaskMetadata(ttl=60_000))
        with pytest.raises(ValidationError, match="CallToolResult"):
            await client.session.send_request(CallToolRequest(params=params), CreateTaskResult)
        # The server did create the task: the run is there, and finishes.
        (task,) = (await list_tasks(client.session)).tasks
        assert (await task_result(client.session, task.task_id)).content[0].text == ANSWER  # type: ignore[union-attr]


async def test_a_task_is_created_polled_to_completed_and_its_result_is_a_plain_calls(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        direct = await client.call_tool("rlm_query", ARGUMENTS)
        started = time.monotonic()
        created = await call_as_task(client.session, ARGUMENTS, {"ttl": 60_000})
        assert time.monotonic() - started < 0.3, "creating the task must not wait for the first model reply"
        task_id = created.task.task_id
        assert created.task.status == "working" and created.task.ttl == 60_000
        assert created.task.poll_interval is not None and created.task.created_at.endswith("Z")
        assert len(runs) == 1
        polled = await get_task(client.session, task_id)
        assert polled.status == "working"
        while (done := await get_task(client.session, task_id)).status == "working":  # the protocol: polling
            await asyncio.sleep(0.05)
        assert done.status == "completed" and done.poll_interval is None
        assert done.last_updated_at >= done.created_at
        result = await task_result(client.session, task_id)
        again = await task_result(client.session, task_id)
        fetched = await client.call_tool("rlm_query", {"run_id": task_id})  # the task is the background run
        plain = await client.call_tool("rlm_query", ARGUMENTS)  # a plain call is unchanged
    assert result.meta == {RELATED_TASK: {"taskId": task_id}}
    assert text_of(result) == ANSWER
    assert same_call(result) == same_call(direct) == same_call(plain)
    assert result.model_copy(update={"meta": None}) == fetched
    assert again == result


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/stat"), reason="finds the sandbox through /proc")
async def test_cancel_ends_the_task_cancelled_and_closes_its_sandbox(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, runs: RunBook
) -> None:
    fake_server.root = HangingRoot(fake_server)
    server = build_server(make_config(sandbox="subprocess"), runs)
    before = run_processes()
    async with Client(server, mode="legacy") as client:
        task_id = (await call_as_task(client.session, {"query": "hang", "text": "x"})).task.task_id
        await _until(lambda: fake_server.counters.in_flight == 3, timeout=60)
        workers = run_processes() - before
        assert workers, "the run's sandbox worker is running"
        # A tasks/result the client gives up on stops waiting; the run goes on.
        waiting = asyncio.create_task(task_result(client.session, task_id))
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert (await get_task(client.session, task_id)).status == "working"
        cancelled = await cancelled_within_2_s(cancel_task(client.session, task_id), workers)
        assert cancelled.status == "cancelled" and cancelled.task_id == task_id
        assert (await get_task(client.session, task_id)).status == "cancelled"
        with pytest.raises(MCPError, match="was cancelled: it has no result"):
            await task_result(client.session, task_id)
        with pytest.raises(MCPError, match="already cancelled"):
            await cancel_task(client.session, task_id)
        status = await client.call_tool("rlm_query", {"run_id": task_id})
        assert status.structured_content is not None and status.structured_content["status"] == "cancelled"


async def test_a_run_that_fails_is_a_failed_task_whose_result_is_the_plain_calls_error(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    server = build_server(make_config(), runs)
    outside = {"query": "secret?", "paths": ["../outside/secret.txt"]}
    async with Client(server, mode="legacy") as client:
        plain = await client.call_tool("rlm_query", outside)
        task_id = (await call_as_task(client.session, outside)).task.task_id
        result = await task_result(client.session, task_id)
        failed = await get_task(client.session, task_id)
    assert plain.is_error and result.is_error
    assert text_of(result) == text_of(plain)
    assert failed.status == "failed" and failed.status_message == text_of(plain)


async def test_a_limit_above_the_servers_ceiling_is_a_failed_task(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    """Limits are checked when the run builds its engine (as for ``background=true``): the task is created,
    and fails with the plain call's message before any model call."""
    server = build_server(make_config(), runs)
    arguments = {"query": "q", "text": "x", "max_depth": 99}
    async with Client(server, mode="legacy") as client:
        plain = await client.call_tool("rlm_query", arguments)
        task_id = (await call_as_task(client.session, arguments)).task.task_id
        result = await task_result(client.session, task_id)
        assert (await get_task(client.session, task_id)).status == "failed"
    assert result.is_error and "max_depth=99 is above" in text_of(result)
    assert text_of(result) == text_of(plain)
    assert answering.counters.requests == 0


async def test_unknown_and_malformed_ids_get_one_error_from_every_tasks_method(
    make_config: MakeConfig, runs: RunBook
) -> None:
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        answers = set()
        for task_id in ("B" * 22, "not an id", "x" * 5000):
            for send in (get_task, task_result, cancel_task):
                with pytest.raises(MCPError) as refused:
                    await send(client.session, task_id)
                answers.add(refused.value.error.message.replace(repr(task_id[:64]), "<id>"))
        assert (await list_tasks(client.session)).tasks == []
    assert answers == {"taskId <id> names no task you can reach (unknown, expired, or not yours)"}


@pytest.mark.parametrize(
    ("task", "error"),
    [
        ({"ttl": -5}, "task.ttl -5 must be a positive number of milliseconds"),
        ({"ttl": 0}, "task.ttl 0 must be a positive"),
        ({"ttl": "forever"}, "task.ttl 'forever' must be a positive"),
        ({"ttl": True}, "task.ttl True must be a positive"),
        ("now", "task 'now' must be an object"),
        # Issue 35, defect 10: a ttl too large for a float answered error code 0.
        ({"ttl": 10**400}, r"task.ttl \(a 1329-bit integer\) must be a positive"),
        ({"ttl": -(10**400)}, r"task.ttl \(a 1329-bit integer\) must be a positive"),
        ({"ttl": [1]}, r"task.ttl \[1\] must be a positive"),
        ({"ttl": {"ms": 1}}, "task.ttl {'ms': 1} must be a positive"),
        ([{"ttl": 1}], "task \\[{'ttl': 1}\\] must be an object"),
    ],
)
async def test_a_bad_ttl_is_refused_and_starts_nothing(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook, task: Any, error: str
) -> None:
    """Malformed task parameters are invalid params (-32602), never a crash's code 0 (held in round 4)."""
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError, match=error) as refused:
            await call_as_task(client.session, ARGUMENTS, task)
    assert refused.value.error.code == INVALID_PARAMS
    assert len(runs) == 0 and answering.counters.requests == 0


async def test_a_huge_ttl_is_bounded_by_keep_results_for(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        huge = await call_as_task(client.session, ARGUMENTS, {"ttl": 10**30})
        default = await call_as_task(client.session, ARGUMENTS)
        for created in (huge, default):
            assert created.task.ttl == 600_000
            assert runs.get("local", created.task.task_id).keep_seconds == 600
            await task_result(client.session, created.task.task_id)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"query": "q", "backgrund": True}, "unknown argument 'backgrund'"),
        ({"paths": ["docs/a.md"]}, "`query` is missing"),
        ({"query": "q", "background": True}, "leave out background"),
        ({"run_id": "B" * 22}, "leave out run_id"),
        ({"query": "q", "wait": 5}, "leave out wait"),
    ],
)
async def test_a_task_call_that_fails_validation_is_an_error_and_starts_nothing(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook, arguments: dict[str, Any], error: str
) -> None:
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        with pytest.raises(MCPError, match=error):
            await call_as_task(client.session, arguments)
        assert (await list_tasks(client.session)).tasks == []
    assert len(runs) == 0 and answering.counters.requests == 0


async def test_a_thousand_task_calls_get_the_quota_and_tasks_list_has_only_the_started(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, runs: RunBook
) -> None:
    fake_server.root = HangingRoot(fake_server)
    server = build_server(make_config(), runs)
    async with Client(server, mode="legacy") as client:
        created, refused = [], []
        for _ in range(1000):
            try:
                created.append((await call_as_task(client.session, {"query": "hang", "text": "x"})).task.task_id)
            except MCPError as exc:
                refused.append(exc.error.message)
        assert len(created) == 4 and len(refused) == 996
        assert all("background runs of yours are working (max_per_client 4)" in m for m in refused)
        listed = await list_tasks(client.session)
        assert sorted(t.task_id for t in listed.tasks) == sorted(created)
        assert {t.status for t in listed.tasks} == {"working"}
        # A plain call still runs beside them.
        plain = await client.call_tool("rlm_query", {"query": "quick", "text": "x"})
        assert not plain.is_error, text_of(plain)
        assert len(runs) == 4
        for task_id in created:
            assert (await cancel_task(client.session, task_id)).status == "cancelled"


async def test_a_task_param_is_left_to_the_sdk_on_2026_07_28(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    """Tasks left the core protocol in 2026-07-28: the server does not answer a ``task`` param with a task
    there, and serves no ``tasks/*``."""
    server = build_server(make_config(), runs)
    async with Client(server) as client:
        with pytest.raises(MCPError):
            await get_task(client.session, "B" * 22)
        with pytest.raises((MCPError, ValidationError)):
            await call_as_task(client.session, ARGUMENTS)
