"""Cancellation stops the run (sub-calls cancelled, sandbox closed within 2 s); concurrent calls are independent."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from rlm_adapters.core.events import Event, SubCallStarted
from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.runs.progress import ProgressReporter
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import turn_of
from tests.core.sandbox.helpers import descendants as pool_aware_descendants
from tests.mcp_server.conftest import MakeConfig
from tests.mcp_server.exits import exited

_PID = re.compile(r"WORKER-PID (\d+)")


class HangingRoot:
    """Root policy: turn 0 prints the sandbox worker's pid; turn 1 starts three sub-calls that never answer.

    Calls whose query mentions "quick" answer at once instead, so a neighbouring call can run alongside.
    """

    def __init__(self, server: FakeOpenAIServer) -> None:
        self.server = server
        self.pids: list[int] = []

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        if "quick" in str(messages[1].get("content", "")):
            return "FINAL(quick answer)"
        if turn_of(messages) == 0:
            return "```repl\nimport os\nprint('WORKER-PID', os.getpid())\n```"
        self.pids += [int(m) for m in _PID.findall(str(messages[-1].get("content", "")))]
        self.server.hang_next(3)
        return '```repl\nanswers = llm_query_batched(["one", "two", "three"])\n```'


async def _until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def descendants(pid: int | None = None) -> set[int]:
    """Live processes below `pid` (default: this one), from /proc; zombies count as gone, idle spares aside."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [os.getpid() if pid is None else pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if not _idle_spare(child):
                found.add(child)
                todo.append(child)
    return found


def run_processes() -> set[int]:
    """The live processes below this one that are not idle spare workers, by the spare pool's own list (once
    no spare is being started): taken before a run and after it started, the difference is its sandbox, and
    neither a spare started meanwhile nor what an earlier test left behind."""
    return set(pool_aware_descendants())


def _idle_spare(pid: int) -> bool:
    """A spare sandbox worker kept for the next run (see `spares`): its context folder is still empty."""
    try:
        context = Path(os.readlink(f"/proc/{pid}/cwd")).parent / "context"
        return context.parent.name.startswith("rlm-worker-") and not any(context.iterdir())
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the sandbox worker through /proc")
async def test_cancel_stops_the_run_and_closes_the_sandbox(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    root = HangingRoot(fake_server)
    fake_server.root = root
    batch_started = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message and "0/3 sub-calls" in message:
            batch_started.set()

    server = build_server(make_config(sandbox="subprocess"))
    before = run_processes()
    async with Client(server) as client:
        call = asyncio.create_task(
            client.call_tool("rlm_query", {"query": "hang", "text": "x"}, progress_callback=on_progress)
        )
        await asyncio.wait_for(batch_started.wait(), 60)
        assert root.pids, "the sandbox ran the first cell"
        workers = run_processes() - before
        assert workers, "the subprocess sandbox runs as a child process"
        # The three sub-calls reach the fake server (another thread: nothing to await, so poll).
        await _until(lambda: fake_server.counters.in_flight == 3)
        started = time.monotonic()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        # The client's cancelled call returns as soon as it has sent notifications/cancelled; the server stops
        # the run after that, on its own. What is promised is the sandbox closed within 2 s of the cancel.
        left = await exited(workers, 2.0 - (time.monotonic() - started))
        assert not left, "the sandbox worker must be gone within 2 s of the cancel"
        # The server is still usable afterwards.
        again = await client.call_tool("rlm_query", {"query": "quick", "text": "x"})
        assert again.content[0].text == "quick answer"  # type: ignore[union-attr]
    # Nothing of the cancelled run is left running on this loop.
    leftovers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert leftovers == []


async def test_two_concurrent_calls_do_not_interfere(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.latency = 0.05

    def root(messages: list[dict[str, Any]]) -> str:
        question = str(messages[1].get("content", ""))
        tag = "alpha" if "alpha" in question else "beta"
        if turn_of(messages) == 0:
            return f'```repl\nr = llm_query_batched([d["text"] for d in context])\nmine = "{tag}:" + ",".join(r)\n```'
        return '```repl\nFINAL_VAR("mine")\n```'

    fake_server.root = root
    server = build_server(make_config())
    async with Client(server) as client:
        alpha, beta = await asyncio.gather(
            client.call_tool("rlm_query", {"detail": "full", "query": "alpha", "paths": ["docs/a.md"]}),
            client.call_tool("rlm_query", {"detail": "full", "query": "beta", "paths": ["docs/b.md", "notes.txt"]}),
        )
    # Each answer cites only its own call's files.
    assert alpha.content[0].text == "alpha:4242\n\nSources:\n- docs/a.md:1"  # type: ignore[union-attr]
    assert beta.content[0].text == "beta:NONE,NONE"  # too short to be matched  # type: ignore[union-attr]
    assert alpha.structured_content is not None and beta.structured_content is not None
    assert alpha.structured_content["trajectory_id"] != beta.structured_content["trajectory_id"]
    assert alpha.structured_content["detail"]["usage"]["sub"]["calls"] == 1
    assert beta.structured_content["detail"]["usage"]["sub"]["calls"] == 2


async def test_reporter_heartbeat_task_ends_with_the_call() -> None:
    sent: list[str | None] = []

    async def send(progress: float, total: float | None, message: str | None) -> None:
        sent.append(message)

    events: list[Event] = []
    async with ProgressReporter(send, max_iterations=1, heartbeat=0.01) as reporter:
        events.append(
            SubCallStarted(
                run_id="r",
                call_id="c",
                batch_id="b",
                batch_size=2,
                call_kind="llm_query",
                model="m",
                prompt="",
            )
        )
        for event in events:
            await reporter.on_event(event)
    names = {t.get_name() for t in asyncio.all_tasks()}
    assert "rlm-mcp-heartbeat" not in names
    assert "iteration 0/1 · 0/2 sub-calls · $0.00" in sent
