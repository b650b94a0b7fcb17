"""The real console entry point over stdio, through the SDK's client session."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import server_env
from tests.mcp_server.test_cancel import HangingRoot, descendants


def _params(workspace: Path, env: dict[str, str], *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(workspace), *extra],
        env=env,
        cwd=str(workspace),
    )


@pytest.mark.slow
async def test_stdio_lists_and_calls_the_tool(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(llm_query(context[0]["text"]))\n```'])
    env = server_env(fake_server, tmp_path / "logs")
    async with Client(_params(workspace, env, "--sandbox", "local")) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["rlm_query"]
        result = await client.call_tool("rlm_query", {"detail": "full", "query": "magic?", "paths": ["docs/a.md"]})
        assert result.structured_content is not None
        trajectory = await client.read_resource(f"rlm://trajectories/{result.structured_content['trajectory_id']}")
    assert result.content[0].text == "4242\n\nSources:\n- docs/a.md:1"  # type: ignore[union-attr]
    assert result.structured_content["detail"]["files_read"] == [
        {"path": "docs/a.md", "size": 26, "invalid_utf8": False}
    ]
    assert '"query": "magic?"' in trajectory.contents[0].text  # type: ignore[union-attr]
    assert list((tmp_path / "logs").glob("rlm_*.jsonl"))


async def test_stdio_without_a_model_still_lists_tools(workspace: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in server_env_base().items()}
    async with Client(_params(workspace, env, "--log-dir", str(tmp_path / "logs"))) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["rlm_query"]
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
    assert result.is_error
    assert "RLM_MODEL" in result.content[0].text  # type: ignore[union-attr]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the sandbox worker through /proc")
@pytest.mark.slow
async def test_stdio_cancellation_stops_the_run(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    root = HangingRoot(fake_server)
    fake_server.root = root
    batch_started = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message and "0/3 sub-calls" in message:
            batch_started.set()

    env = server_env(fake_server, tmp_path / "logs")
    async with Client(_params(workspace, env, "--sandbox", "subprocess")) as client:
        before = descendants()  # the server process itself
        call = asyncio.create_task(
            client.call_tool("rlm_query", {"query": "hang", "text": "x"}, progress_callback=on_progress)
        )
        await asyncio.wait_for(batch_started.wait(), 60)
        workers = descendants() - before
        assert workers, "the sandbox worker runs below the server process"
        call.cancel()  # the SDK sends notifications/cancelled for the abandoned request
        with pytest.raises(asyncio.CancelledError):
            await call
        cancelled_at = time.monotonic()
        # Another process: nothing to await, so watch the worker disappear.
        while workers & descendants():
            assert time.monotonic() - cancelled_at < 2.0, "the sandbox was not closed within 2 s"
            await asyncio.sleep(0.02)
        again = await client.call_tool("rlm_query", {"query": "quick", "text": "x"})
        assert again.content[0].text == "quick answer"  # type: ignore[union-attr]


def server_env_base() -> dict[str, str]:
    """The environment without any model settings."""
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}
