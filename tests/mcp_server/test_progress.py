"""Progress notifications: one per root iteration and per batch of sub-calls, plus heartbeats."""

from __future__ import annotations

from typing import Any

from mcp import Client

from rlm_adapters.core.events import RootCall, SubCallFinished, SubCallStarted
from rlm_adapters.mcp_server import build_server
from rlm_adapters.mcp_server.runs.progress import ProgressReporter
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig

Notification = tuple[float, float | None, str | None]


class Recorder:
    """Collects progress notifications as a client's progress callback or a reporter's sender."""

    def __init__(self) -> None:
        self.seen: list[Notification] = []

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))

    @property
    def messages(self) -> list[str]:
        return [m or "" for _, _, m in self.seen]


async def test_progress_reports_iterations_and_sub_call_batches(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = scripted_root(
        [
            '```repl\nr = llm_query_batched(["a", "b", "c"])\n```',
            '```repl\nr2 = llm_query_batched(["the magic number is 5150", "e"])\nFINAL(r2[0])\n```',
        ]
    )
    recorder = Recorder()
    async with Client(build_server(make_config())) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x"}, progress_callback=recorder)
    assert result.structured_content is not None and result.structured_content["answer"] == "5150"
    messages = recorder.messages
    assert messages[0] == "starting · iteration 0/30 · $0.00"
    assert "iteration 1/30 · $0.00" in messages
    assert "iteration 1/30 · 0/3 sub-calls · $0.00" in messages  # the first batch started
    assert "iteration 1/30 · 3 sub-calls · $0.00" in messages  # ... and finished
    assert "iteration 2/30 · 5 sub-calls · $0.00" in messages
    assert messages[-1] == "done · iteration 2/30 · 5 sub-calls · $0.00"
    values = [p for p, _, _ in recorder.seen]
    assert values == sorted(values) and len(set(values)) == len(values), "progress must strictly increase"
    assert {t for _, t, _ in recorder.seen} == {30.0}


async def test_heartbeat_while_the_root_model_is_slow(make_config: MakeConfig, fake_server: FakeOpenAIServer) -> None:
    fake_server.root = scripted_root(["FINAL(ok)"])
    fake_server.root_latency = 1.0
    recorder = Recorder()
    async with Client(build_server(make_config(heartbeat=0.1))) as client:
        await client.call_tool("rlm_query", {"query": "q", "text": "x"}, progress_callback=recorder)
    # While the one root call is outstanding (1 s) only heartbeats can arrive, about ten of them.
    before_first_iteration = recorder.messages.index("done · iteration 1/30 · $0.00")
    assert before_first_iteration >= 4


async def test_no_progress_token_means_no_notifications_but_same_answer(
    make_config: MakeConfig, fake_server: FakeOpenAIServer
) -> None:
    fake_server.root = scripted_root(["FINAL(ok)"])
    async with Client(build_server(make_config(heartbeat=0.05))) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x"})
    assert result.content[0].text == "ok"  # type: ignore[union-attr]


async def test_reporter_counts_cost_and_nested_runs() -> None:
    recorder = Recorder()
    reporter = ProgressReporter(recorder, max_iterations=10, heartbeat=60)
    async with reporter:
        common: dict[str, Any] = {"model": "m", "input_tokens": 1, "output_tokens": 1, "duration": 0.1}
        await reporter.on_event(RootCall(run_id="r", iteration=1, messages_sent=[], reply="", cost=0.01, **common))
        # A nested run's root calls add cost but do not move the top-level iteration.
        await reporter.on_event(
            RootCall(run_id="n", depth=1, iteration=4, messages_sent=[], reply="", cost=0.02, **common)
        )
        await reporter.on_event(
            SubCallStarted(
                run_id="r",
                call_id="c1",
                batch_id=None,
                batch_size=1,
                call_kind="llm_query",
                model="m",
                prompt="p",
            )
        )
        await reporter.on_event(
            SubCallFinished(
                run_id="r",
                call_id="c1",
                batch_id=None,
                call_kind="llm_query",
                response="x",
                error=None,
                cost=0.01,
                **common,
            )
        )
    assert reporter.tally.iteration == 1
    assert recorder.messages[-1] == "iteration 1/10 · 1 sub-call · $0.04"
    # A single sub-call notifies once, when it comes back.
    assert len(recorder.seen) == 3


async def test_a_failing_sender_does_not_stop_the_reporter() -> None:
    async def broken(progress: float, total: float | None, message: str | None) -> None:
        raise ConnectionError("client went away")

    reporter = ProgressReporter(broken, max_iterations=3, heartbeat=60)
    async with reporter:
        await reporter.notify("running")
    assert reporter.notifications == 2


async def test_a_resumed_run_says_so_in_its_last_progress_message_and_its_result(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, tmp_path: Any
) -> None:
    # Issue 37: a run replayed from the call cache is never silent, in progress as in the result.
    fake_server.root = scripted_root(['```repl\nr = llm_query_batched(["a", "b"])\n```', "FINAL(ok)"])
    config = make_config(cache=tmp_path / "calls.sqlite", model="gpt-5", sub_model="gpt-5-mini")
    first, again = Recorder(), Recorder()
    async with Client(build_server(config)) as client:
        await client.call_tool("rlm_query", {"query": "q", "text": "x"}, progress_callback=first)
        requests = fake_server.counters.requests
        result = await client.call_tool("rlm_query", {"query": "q", "text": "x"}, progress_callback=again)
    assert fake_server.counters.requests == requests  # every call came from the cache
    assert not any("resumed" in message for message in first.messages)
    assert result.structured_content is not None
    note = result.structured_content["resumed"]
    assert note.startswith("resumed: 4 of 4 model calls from calls.sqlite, $") and note.endswith(" not paid again")
    assert again.messages[-1].startswith(f"done · {note}"), again.messages[-1]
    assert [m for m in again.messages if "resumed" in m] == [again.messages[-1]]  # said once
    assert result.content[0].text.endswith(f"({note})")  # type: ignore[union-attr]
