"""Background runs over the real transports, with the SDK's client: over HTTP a run belongs to whoever holds
the token (another MCP session fetches it), without one to its MCP session (another cannot reach it); over
stdio the one client fetches it after the call that started it is over; cancelling closes the sandbox within
2 s either way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult

from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import server_env
from tests.mcp_server.exits import cancelled_within_2_s
from tests.mcp_server.test_cancel import HangingRoot, _until, descendants
from tests.mcp_server.test_http import TOKEN, connect, served
from tests.mcp_server.test_stdio import _params

ANSWER = "4242\n\nSources:\n- docs/a.md:1"
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the sandbox worker through /proc")


def text_of(result: CallToolResult) -> str:
    return result.content[0].text  # type: ignore[union-attr]


def run_id_of(result: CallToolResult) -> str:
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None and result.structured_content["status"] == "running"
    return str(result.structured_content["run_id"])


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.slow
async def test_http_a_new_session_fetches_the_run_its_token_started(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path, mode: str
) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(llm_query(context[0]["text"]))\n```'])
    fake_server.root_latency = 0.3
    with served(workspace, server_env(fake_server, tmp_path / "logs"), "--token", TOKEN) as (_process, url):
        async with connect(url, mode=mode, token=TOKEN) as first:
            run_id = run_id_of(await first.call(query="magic?", paths=["docs/a.md"], background=True))
            first_session = first.session_id
        # The first MCP session has ended (DELETE); a new one, with the same token, fetches the run.
        async with connect(url, mode="legacy", token=TOKEN) as second:
            assert second.session_id != first_session
            fetched = await second.call(run_id=run_id, wait=60)
    assert text_of(fetched) == ANSWER


@needs_proc
@pytest.mark.slow
async def test_http_another_session_without_a_token_cannot_reach_the_run_and_cancel_closes_the_sandbox(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = HangingRoot(fake_server)
    # No --token (loopback): each MCP session is its own principal, whatever bearer it sends unchecked.
    env = server_env(fake_server, tmp_path / "logs")
    with served(workspace, env, "--sandbox", "subprocess") as (process, url):
        async with (
            connect(url, mode="legacy", token="alice") as alice,
            connect(url, mode="legacy", token="alice") as mallory,
        ):
            run_id = run_id_of(await alice.call(query="hang", text="x", background=True))
            await _until(lambda: fake_server.counters.in_flight >= 3, timeout=60)
            workers = descendants(process.pid)
            assert workers, "the sandbox worker runs below the server"
            answers: list[str] = []
            for arguments in ({"run_id": run_id}, {"run_id": run_id, "cancel": True}, {"run_id": "B" * 22}):
                refused = await mallory.call(**arguments)
                assert refused.is_error
                answers.append(text_of(refused).replace(repr(arguments["run_id"]), "<id>"))
            assert len(set(answers)) == 1 and "names no run you can reach" in answers[0]
            # Mallory's cancel stopped nothing.
            status = await alice.call(run_id=run_id)
            assert status.structured_content is not None and status.structured_content["status"] == "running"
            cancelled = await cancelled_within_2_s(alice.call(run_id=run_id, cancel=True), workers)
    assert cancelled.structured_content is not None and cancelled.structured_content["status"] == "cancelled"


@pytest.mark.slow
async def test_stdio_a_background_run_is_fetched_after_its_call_returned(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(llm_query(context[0]["text"]))\n```'])
    fake_server.root_latency = 0.3
    env = server_env(fake_server, tmp_path / "logs")
    async with Client(_params(workspace, env, "--sandbox", "local")) as client:
        arguments = {"query": "magic?", "paths": ["docs/a.md"]}
        run_id = run_id_of(await client.call_tool("rlm_query", {**arguments, "background": True}))
        direct = await client.call_tool("rlm_query", {"query": "magic?", "paths": ["docs/a.md"]})
        fetched = await client.call_tool("rlm_query", {"run_id": run_id, "wait": 60})
    assert text_of(fetched) == text_of(direct) == ANSWER


@needs_proc
@pytest.mark.slow
async def test_stdio_cancel_closes_the_sandbox_within_2_s(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_server.root = HangingRoot(fake_server)
    env = server_env(fake_server, tmp_path / "logs")
    async with Client(_params(workspace, env, "--sandbox", "subprocess")) as client:
        before = descendants()
        arguments: dict[str, Any] = {"query": "hang", "text": "x", "background": True}
        run_id = run_id_of(await client.call_tool("rlm_query", arguments))
        await _until(lambda: fake_server.counters.in_flight >= 3, timeout=60)
        workers = descendants() - before
        assert workers, "the sandbox worker runs below the server process"
        cancelled = await cancelled_within_2_s(
            client.call_tool("rlm_query", {"run_id": run_id, "cancel": True}), workers
        )
        assert cancelled.structured_content is not None and cancelled.structured_content["status"] == "cancelled"
