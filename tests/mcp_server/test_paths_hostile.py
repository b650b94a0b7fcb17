"""File loading through the tool cannot hang the server or outlive the call (issue 12, item 8)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from rlm_adapters.files import _walk
from rlm_adapters.mcp_server import build_server
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig, server_env

LIST_IDS = '```repl\nFINAL(",".join(d["id"] for d in context))\n```'


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def test_fifo_paths_six_times_then_a_text_only_call_is_still_answered(
    make_config: MakeConfig, workspace: Path, fake_server: FakeOpenAIServer
) -> None:
    os.mkfifo(workspace / "pipe")
    fake_server.root = scripted_root(["FINAL(still here)"])
    with anyio.fail_after(60):
        async with Client(build_server(make_config())) as client:
            for _ in range(6):
                result = await client.call_tool("rlm_query", {"query": "q", "paths": ["pipe"]})
                assert result.is_error
                assert _text(result).endswith(
                    "no readable text files in ['pipe'] (skipped pipe: a FIFO (named pipe), not a regular file)"
                )
            answer = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
    assert _text(answer) == "still here"


async def test_one_bad_entry_is_skipped_and_the_call_goes_on(
    make_config: MakeConfig, workspace: Path, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = scripted_root([LIST_IDS])
    (workspace / "docs" / "self").symlink_to("self")
    os.mkfifo(workspace / "docs" / "pipe")
    with open(os.fsencode(workspace / "docs") + b"/caf\xe9.md", "wb") as handle:
        handle.write(b"named in latin-1\n")
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"detail": "full", "query": "q", "paths": ["docs"]})
    assert not result.is_error
    # The three files read are cited whole, the latin-1 name as one name; the skipped entries are not.
    assert _text(result) == (
        "docs/a.md,docs/b.md,docs/caf\\xe9.md\n\nSources:\n- docs/a.md\n- docs/b.md\n- docs/caf\\xe9.md"
    )
    assert result.structured_content is not None
    assert result.structured_content["detail"]["files_skipped"] == [
        {"path": "docs/pipe", "reason": "a FIFO (named pipe), not a regular file"},
        {"path": "docs/self", "reason": "a symlink loop"},
    ]


async def test_glob_through_symlinked_folder_reveals_nothing_outside(
    make_config: MakeConfig, workspace: Path, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = scripted_root([LIST_IDS, LIST_IDS])
    (workspace / "docs" / "escape").symlink_to(workspace.parent / "outside")
    async with Client(build_server(make_config())) as client:
        first = await client.call_tool("rlm_query", {"detail": "full", "query": "q", "paths": ["**/*.txt"]})
        (workspace.parent / "outside" / "secret.txt").unlink()
        second = await client.call_tool("rlm_query", {"detail": "full", "query": "q", "paths": ["**/*.txt"]})
    assert first.structured_content is not None and second.structured_content is not None
    assert (
        first.structured_content["detail"]["files_skipped"]
        == second.structured_content["detail"]["files_skipped"]
        == [{"path": "docs/escape", "reason": "symlink pointing outside the allowed roots"}]
    )


@pytest.fixture
def stuck_listing(monkeypatch: pytest.MonkeyPatch) -> dict[str, threading.Event]:
    """Listing a folder blocks until the load is cancelled, like a file system that stopped answering."""
    events = {"entered": threading.Event(), "released": threading.Event()}
    original = _walk.Tree.entries

    def stuck(self: _walk.Tree, *args: Any) -> Any:
        events["entered"].set()
        cancel = self.limits.cancel
        assert cancel is not None
        if cancel.wait(30):
            events["released"].set()
        return original(self, *args)

    monkeypatch.setattr(_walk.Tree, "entries", stuck)
    return events


async def test_loading_runs_inside_the_calls_timeout_and_the_loader_thread_stops(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, stuck_listing: dict[str, threading.Event]
) -> None:
    async with Client(build_server(make_config())) as client:
        with anyio.fail_after(20):
            result = await client.call_tool("rlm_query", {"query": "q", "paths": ["docs"], "timeout": 0.2})
        assert result.is_error
        assert _text(result).endswith("reading the paths took longer than the call's timeout (0.2 s); narrow the paths")
        assert await anyio.to_thread.run_sync(stuck_listing["released"].wait, 10)
    assert fake_server.counters.requests == 0


async def test_cancelling_the_call_stops_the_loader_thread(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, stuck_listing: dict[str, threading.Event]
) -> None:
    fake_server.root = scripted_root(["FINAL(answered)"])
    async with Client(build_server(make_config())) as client:
        call = asyncio.create_task(client.call_tool("rlm_query", {"query": "q", "paths": ["docs"]}))
        assert await anyio.to_thread.run_sync(stuck_listing["entered"].wait, 10)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await anyio.to_thread.run_sync(stuck_listing["released"].wait, 10)
        again = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
    assert _text(again) == "answered"


async def test_stuck_loads_never_take_the_threads_text_calls_need(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, stuck_listing: dict[str, threading.Event]
) -> None:
    fake_server.root = scripted_root(["FINAL(answered)"] * 2)
    async with Client(build_server(make_config())) as client:
        stuck = [
            asyncio.create_task(client.call_tool("rlm_query", {"query": "q", "paths": ["docs"]})) for _ in range(12)
        ]
        assert await anyio.to_thread.run_sync(stuck_listing["entered"].wait, 10)
        with anyio.fail_after(30):
            again = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
        assert _text(again) == "answered"
        for task in stuck:
            task.cancel()
        await asyncio.gather(*stuck, return_exceptions=True)


@pytest.mark.slow
async def test_stdio_server_answers_after_six_fifo_calls(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    os.mkfifo(workspace / "pipe")
    fake_server.root = scripted_root(["FINAL(still here)"])
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(workspace), "--sandbox", "local"],
        env=server_env(fake_server, tmp_path / "logs"),
        cwd=str(workspace),
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            fifo_calls = [await client.call_tool("rlm_query", {"query": "q", "paths": ["pipe"]}) for _ in range(6)]
            answer = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
    assert all(r.is_error and "a FIFO (named pipe), not a regular file" in _text(r) for r in fifo_calls)
    assert _text(answer) == "still here"
