"""Background runs in process (the local client, as over stdio): started at once, fetched by id from another
client, waited for with progress, cancelled with the sandbox closed; and what a hostile client tries."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult

from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.runs.background import RunBook, RunLimits
from rlm_adapters.mcp_server.runs.tool_schema import MAX_WAIT
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig
from tests.mcp_server.exits import cancelled_within_2_s
from tests.mcp_server.test_cancel import HangingRoot, _until, run_processes

ANSWER_SCRIPT = ['```repl\nFINAL(llm_query(context[0]["text"]))\n```']
# Fields that differ between two runs of one conversation.
PER_RUN = {"trajectory_id", "trajectory_uri", "elapsed_seconds"}


def text_of(result: CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def same_call(result: CallToolResult) -> tuple[str, dict[str, Any], bool]:
    assert result.structured_content is not None
    structured = {k: v for k, v in result.structured_content.items() if k not in PER_RUN}
    return text_of(result), structured, bool(result.is_error)


@pytest.fixture
async def runs() -> AsyncIterator[RunBook]:
    """The server's background runs, stopped when the test ends."""
    book = RunBook()
    yield book
    await book.aclose()


@pytest.fixture
def answering(fake_server: FakeOpenAIServer) -> FakeOpenAIServer:
    """The fake server answering `ANSWER_SCRIPT`, its root replies 0.3 s late (a start must not wait for them)."""
    fake_server.root = scripted_root(ANSWER_SCRIPT)
    fake_server.root_latency = 0.3
    return fake_server


async def start(client: Client, **arguments: Any) -> str:
    started = await client.call_tool("rlm_query", {**arguments, "background": True})
    assert not started.is_error, text_of(started)
    assert started.structured_content is not None
    assert started.structured_content["status"] == "running"
    run_id = started.structured_content["run_id"]
    assert isinstance(run_id, str) and len(run_id) == 22
    return run_id


async def test_a_background_run_returns_at_once_and_its_fetch_equals_a_direct_call(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    fake_server = answering
    server = build_server(make_config(), runs)
    arguments = {"query": "magic?", "paths": ["docs/a.md"]}
    async with Client(server) as client:
        direct = await client.call_tool("rlm_query", arguments)
        before = fake_server.counters.requests
        started = time.monotonic()
        run_id = await start(client, **arguments)
        assert time.monotonic() - started < 0.3, "the start must not wait for the first model reply"
        fetched = await client.call_tool("rlm_query", {"run_id": run_id, "wait": 60})
        again = await client.call_tool("rlm_query", {"run_id": run_id})  # kept: fetched again, no new run
    assert same_call(fetched) == same_call(direct)
    assert text_of(fetched) == "4242\n\nSources:\n- docs/a.md:1"
    assert same_call(again) == same_call(direct)
    assert fake_server.counters.requests - before == 2  # one root call, one sub-call: the run ran once


async def test_another_client_fetches_the_run_after_the_first_one_left(
    make_config: MakeConfig, answering: FakeOpenAIServer, runs: RunBook
) -> None:
    server = build_server(make_config(), runs)
    async with Client(server) as first:
        run_id = await start(first, query="magic?", paths=["docs/a.md"])
    # The first client is gone (its MCP session ended): the run goes on and belongs to the local user.
    async with Client(server) as second:
        fetched = await second.call_tool("rlm_query", {"run_id": run_id, "wait": 60})
    assert text_of(fetched) == "4242\n\nSources:\n- docs/a.md:1"


async def test_waiting_reports_progress_and_a_short_wait_returns_the_status(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, runs: RunBook
) -> None:
    fake_server.root = HangingRoot(fake_server)
    server = build_server(make_config(heartbeat=0.05), runs)
    messages: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with Client(server) as client:
        run_id = await start(client, query="hang", text="x")
        waited = await client.call_tool("rlm_query", {"run_id": run_id, "wait": 1.0}, progress_callback=on_progress)
        assert waited.structured_content is not None
        assert waited.structured_content["status"] == "running"
        assert waited.structured_content["run_id"] == run_id
        assert "sub-calls" in waited.structured_content["message"]
        assert f"run_id={run_id!r}" in text_of(waited)
        assert messages, "a waiting call hears the run's progress"
        # A waiting call that is itself cancelled stops waiting; the run goes on.
        waiting = asyncio.create_task(client.call_tool("rlm_query", {"run_id": run_id, "wait": 60}))
        await asyncio.sleep(0.1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        status = await client.call_tool("rlm_query", {"run_id": run_id})
        assert status.structured_content is not None and status.structured_content["status"] == "running"
        cancelled = await client.call_tool("rlm_query", {"run_id": run_id, "cancel": True})
        assert cancelled.structured_content is not None and cancelled.structured_content["status"] == "cancelled"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the sandbox worker through /proc")
async def test_cancel_stops_the_run_and_closes_its_sandbox_within_2_s(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, runs: RunBook
) -> None:
    fake_server.root = HangingRoot(fake_server)
    server = build_server(make_config(sandbox="subprocess"), runs)
    before = run_processes()
    async with Client(server) as client:
        run_id = await start(client, query="hang", text="x")
        # Until the run's three sub-calls hang at the fake server (another thread: nothing to await).
        await _until(lambda: fake_server.counters.in_flight == 3, timeout=60)
        workers = run_processes() - before
        assert workers, "the subprocess sandbox runs as a child process"
        cancelled = await cancelled_within_2_s(
            client.call_tool("rlm_query", {"run_id": run_id, "cancel": True}), workers
        )
        assert cancelled.structured_content is not None
        assert cancelled.structured_content["status"] == "cancelled"
        later = await client.call_tool("rlm_query", {"run_id": run_id})
        assert later.structured_content is not None and later.structured_content["status"] == "cancelled"
        again = await client.call_tool("rlm_query", {"query": "quick", "text": "x"})
        assert text_of(again) == "quick answer"


async def test_a_background_error_is_the_direct_calls_error(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, runs: RunBook
) -> None:
    server = build_server(make_config(), runs)
    arguments = {"query": "q", "paths": ["../outside/secret.txt"]}
    async with Client(server) as client:
        direct = await client.call_tool("rlm_query", arguments)
        run_id = await start(client, **arguments)
        fetched = await client.call_tool("rlm_query", {"run_id": run_id, "wait": 30})
    assert direct.is_error and fetched.is_error
    assert text_of(fetched) == text_of(direct)
    assert fake_server.counters.requests == 0


async def test_forged_malformed_and_expired_ids_all_get_one_answer(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = scripted_root(ANSWER_SCRIPT)
    now = [0.0]
    runs = RunBook(RunLimits(keep_seconds=60), clock=lambda: now[0])
    server = build_server(make_config(), runs)
    async with Client(server) as client:
        run_id = await start(client, query="magic?", paths=["docs/a.md"])
        await client.call_tool("rlm_query", {"run_id": run_id, "wait": 60})
        now[0] += 61  # past --keep-results-for
        answers = []
        for forged in (run_id, run_id[:-1] + ("A" if run_id[-1] != "A" else "B"), "x" * 22, "", "../" * 10_000):
            result = await client.call_tool("rlm_query", {"run_id": forged})
            assert result.is_error
            answers.append(text_of(result).replace(repr(forged[:64]), "<id>"))
    assert len(set(answers)) == 1, answers
    assert "names no run you can reach" in answers[0]
    assert "../../" * 20 not in answers[0], "a hostile id is quoted cut short"
    assert len(runs) == 0
    await runs.aclose()


def test_another_owners_run_is_unknown_to_get() -> None:
    async def main() -> None:
        runs = RunBook()
        never = asyncio.Event()

        async def work(_run: Any) -> CallToolResult:
            await never.wait()
            raise AssertionError("unreachable")

        mine = runs.start("bearer:a", work)
        with pytest.raises(ValueError) as theirs:
            runs.get("bearer:b", mine.run_id)
        with pytest.raises(ValueError) as unknown:
            runs.get("bearer:b", "A" * 22)
        assert str(theirs.value).replace(mine.run_id, "<id>") == str(unknown.value).replace("A" * 22, "<id>")
        assert runs.get("bearer:a", mine.run_id) is mine
        await runs.aclose()
        assert mine.task is not None and mine.task.cancelled()

    asyncio.run(main())


def test_ten_thousand_starts_are_bounded_by_the_quotas() -> None:
    async def main() -> None:
        limits = RunLimits(max_per_client=4, max_running=6, keep_results=64)
        runs = RunBook(limits)
        never = asyncio.Event()

        async def work(_run: Any) -> CallToolResult:
            await never.wait()
            raise AssertionError("unreachable")

        refused: list[str] = []
        for owner in ("bearer:a", "bearer:b"):
            for _ in range(10_000):
                try:
                    runs.start(owner, work)
                except ValueError as exc:
                    refused.append(str(exc))
        assert len(runs) == 6  # a's 4, then b's 2 until the server's cap
        assert len(refused) == 20_000 - 6
        assert "(--max-client-runs" not in refused[0] and "max_per_client 4" in refused[0]
        assert "max_running 6" in refused[-1]
        ids = {run_id for _owner, run_id in runs._runs}
        assert len(ids) == 6
        await runs.aclose()

    asyncio.run(main())


def test_finished_results_are_kept_at_most_keep_results_and_keep_seconds() -> None:
    async def main() -> None:
        now = [0.0]
        limits = RunLimits(max_per_client=100, max_running=100, keep_results=3, keep_seconds=10)
        runs = RunBook(limits, clock=lambda: now[0])

        async def work(_run: Any) -> CallToolResult:
            return CallToolResult(content=[])

        started = [runs.start("local", work) for _ in range(5)]
        await asyncio.wait({run.task for run in started if run.task is not None})
        assert len(runs) == 3  # the two oldest results went first
        with pytest.raises(ValueError):
            runs.get("local", started[0].run_id)
        assert isinstance(runs.outcome(runs.get("local", started[4].run_id)), CallToolResult)
        now[0] = 10.5
        with pytest.raises(ValueError):
            runs.get("local", started[4].run_id)
        assert len(runs) == 0

    asyncio.run(main())


async def test_the_quota_holds_over_mcp(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = HangingRoot(fake_server)
    runs = RunBook(RunLimits(max_per_client=2, names={"max_per_client": "--max-client-runs"}))
    server = build_server(make_config(), runs)
    async with Client(server) as client:
        results = [
            await client.call_tool("rlm_query", {"query": "hang", "text": "x", "background": True}) for _ in range(50)
        ]
    started = [r for r in results if not r.is_error]
    assert len(started) == 2
    assert all("(--max-client-runs 2)" in text_of(r) for r in results if r.is_error)
    await runs.aclose()
    assert all(run.task is not None and run.task.done() for run in runs._runs.values())


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"run_id": "A" * 22, "wait": 1e300}, f"above the {MAX_WAIT:g} seconds one call may wait"),
        ({"run_id": "A" * 22, "wait": MAX_WAIT + 1}, f"above the {MAX_WAIT:g} seconds one call may wait"),
        ({"run_id": "A" * 22, "wait": -1}, "must be a number of seconds from 0"),
        ({"run_id": "A" * 22, "query": "q"}, "pass only wait or cancel with it, not query"),
        ({"run_id": "A" * 22, "background": True}, "not background"),
        ({"run_id": "A" * 22, "cancel": True, "wait": 5}, "leave out wait"),
        ({"query": "q", "text": "x", "cancel": True}, "wait and cancel are for run_id"),
        ({"query": "q", "text": "x", "wait": 5}, "wait and cancel are for run_id"),
        ({"text": "x"}, "`query` is missing"),
        ({"query": "q", "text": "x", "backgrund": True}, "unknown argument 'backgrund' (did you mean 'background'?)"),
    ],
)
async def test_bad_arguments_are_refused_in_one_line(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, arguments: dict[str, Any], expected: str
) -> None:
    runs = RunBook()
    async with Client(build_server(make_config(), runs)) as client:
        result = await client.call_tool("rlm_query", arguments)
    assert result.is_error
    assert expected in text_of(result), text_of(result)
    assert "\n" not in text_of(result)
    assert fake_server.counters.requests == 0
    assert len(runs) == 0


async def test_the_schema_refuses_unknown_arguments_and_admits_both_results(make_config: MakeConfig) -> None:
    async with Client(build_server(make_config())) as client:
        tool = (await client.list_tools()).tools[0]
    assert tool.input_schema["additionalProperties"] is False
    assert {"background", "run_id", "wait", "cancel"} <= set(tool.input_schema["properties"])
    assert tool.output_schema is not None and tool.output_schema["type"] == "object"
    required = [branch["required"] for branch in tool.output_schema["anyOf"]]
    assert required[1][:3] == ["run_id", "status", "message"]
    assert "answer" in required[0]


async def test_background_with_the_clients_own_model_is_refused(make_config: MakeConfig) -> None:
    from mcp_types import CreateMessageResult, TextContent

    async def sample(_context: Any, _params: Any) -> CreateMessageResult:
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text="FINAL(x)"), model="m")

    server = build_server(make_config(model=None, base_url=None))
    async with Client(server, mode="legacy", sampling_callback=sample) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x", "background": True})
    assert result.is_error
    assert "background=true needs a model configured on the server" in text_of(result)


def test_tool_error_of_a_run_is_raised_again_by_outcome() -> None:
    async def main() -> None:
        runs = RunBook()

        async def work(_run: Any) -> CallToolResult:
            raise ToolError("that path is outside the roots")

        run = runs.start("local", work)
        await asyncio.wait({run.task} if run.task is not None else set())
        with pytest.raises(ToolError, match="outside the roots"):
            runs.outcome(run)

    asyncio.run(main())
