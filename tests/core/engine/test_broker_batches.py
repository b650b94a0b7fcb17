"""Batches from the REPL are bounded and made lazily (issue 24, defect 8).

``llm_query_batched(['x'] * 300000)`` under default limits cost the host 1 GiB, stalled its loop 12-13 s,
made a run with ``timeout=20`` take 25.5 s and made all 300k calls. A batch now holds at most ``max_batch``
prompts (past it: one failed call naming the option, before anything starts), its calls are made as slots
free (at most ``max_concurrency`` at once, not one task per prompt), and the run's deadline ends it on time.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.events import CellExecuted, Event, SubCallStarted
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.settings import DEFAULTS
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.testing import FakeOpenAIServer
from tests.core.sandbox.helpers import StallProbe
from tests.extras import REPO


def _play(code: str) -> Any:
    def reply(messages: list[Message]) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        return f"```repl\n{code}\n```" if turn == 0 else "FINAL(done)"

    return reply


def _cells_into(events: list[Event]) -> Any:
    """A callback keeping only the cells: the memory measured is the engine's, not this test's."""
    return lambda event: events.append(event) if isinstance(event, CellExecuted) else None


def _output(events: list[Event]) -> str:
    return "\n".join(e.output + (e.error or "") for e in events if isinstance(e, CellExecuted) and e.depth == 0)


def _served(server: FakeOpenAIServer, **options: Any) -> RLM:
    """An RLM whose root and sub-model are the fake server's, through the OpenAI SDK."""
    models = [
        {"base_url": server.base_url, "api_key": "k", "max_retries": 0, "model_name": n} for n in ("root", "leaf")
    ]
    return RLM(
        backend="openai",
        backend_kwargs=models[0],
        other_backends=["openai"],
        other_backend_kwargs=[models[1]],
        environment="subprocess",
        **options,
    )


class CountingModel:
    """A sub-model that keeps nothing per call, noting how many tasks the loop held while it was called."""

    model_name = "counting"

    def __init__(self) -> None:
        self.calls = 0
        self.most_tasks = 0

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        self.calls += 1
        self.most_tasks = max(self.most_tasks, len(asyncio.all_tasks()))
        await asyncio.sleep(0)
        return LMResponse("ok", 1, 1, self.model_name)

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize("environment", ["subprocess", "local"])
@pytest.mark.parametrize("function", ["llm_query_batched", "rlm_query_batched"])
async def test_a_batch_past_max_batch_fails_before_any_call(environment: str, function: str) -> None:
    sub = CountingModel()
    code = f"answers = {function}(['x'] * 10_001)\nprint(len(answers), answers[0])"
    events: list[Event] = []
    rlm = RLM(backend=ScriptedModel(_play(code)), other_backends=[sub], environment=environment)
    result = await rlm.acompletion("context", "question", callbacks=[events.append])
    assert result.finish_reason == "final" and sub.calls == 0
    assert DEFAULTS.max_batch == 10_000
    assert (
        f"10001 Error: {function}: a batch of 10,001 prompts is more than max_batch=10,000; send it in batches of "
        "at most 10,000"
    ) in _output(events)


async def test_max_batch_is_an_option_of_the_rlm() -> None:
    sub = CountingModel()
    code = "print(len(llm_query_batched(['a', 'b', 'c'])), llm_query_batched(['a', 'b', 'c', 'd'])[0])"
    events: list[Event] = []
    rlm = RLM(backend=ScriptedModel(_play(code)), other_backends=[sub], environment="local", max_batch=3)
    assert rlm.max_batch == 3 and rlm.settings.max_batch == 3
    await rlm.acompletion("context", "question", callbacks=[events.append])
    assert sub.calls == 3
    assert "3 Error: llm_query_batched: a batch of 4 prompts is more than max_batch=3" in _output(events)
    with pytest.raises(ConfigurationError, match="max_batch=0 must be an integer >= 1"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), max_batch=0)


async def _batch_of_ten_thousand() -> dict[str, Any]:
    """Run 10,000 prompts in one batch, tracing memory: what the fresh process below reports."""
    sub = CountingModel()
    code = "answers = llm_query_batched(['x'] * 10_000)\nprint(len(answers), set(answers))"
    events: list[Event] = []
    rlm = RLM(backend=ScriptedModel(_play(code)), other_backends=[sub], environment="local", max_concurrency=16)
    tracemalloc.start()
    try:
        result = await rlm.acompletion("context", "question", callbacks=[_cells_into(events)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {
        "finish_reason": result.finish_reason,
        "calls": sub.calls,
        "output": _output(events),
        "most_tasks": sub.most_tasks,
        "peak": peak,
    }


@pytest.mark.slow
def test_a_batch_is_made_as_slots_free_not_all_at_once() -> None:
    """10,000 prompts: main held a task per prompt (and 1.3 KB each); now the batch's width is all it holds."""
    # tracemalloc counts every thread of the process: measured in a fresh one, so that nothing earlier tests
    # left running (reapers, servers, spare workers' readers) is counted.
    program = f"import asyncio, json, {__name__} as m; print(json.dumps(asyncio.run(m._batch_of_ten_thousand())))"
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(done.stdout.splitlines()[-1])
    assert measured["finish_reason"] == "final" and measured["calls"] == 10_000
    assert "10000 {'ok'}" in measured["output"]
    assert measured["most_tasks"] <= 16 + 10  # the batch's lanes, and the run's own few tasks
    peak = measured["peak"]
    assert peak < 2_000_000, f"{peak / 1e6:.1f} MB traced"  # main: 10 MB (a task and a coroutine per prompt)


@pytest.mark.slow
async def test_a_big_batch_against_the_fake_server_keeps_the_loop_free() -> None:
    # 600 prompts through 32 connections: many rounds of slots freeing. Not traced: tracemalloc slows every
    # allocation of 600 real requests several times over (181 s on a loaded machine, past the cell's time limit);
    # the batch's memory is measured by the test above, in a fresh process.
    with FakeOpenAIServer() as server:
        server.root = [
            "```repl\nanswers = llm_query_batched([f'q{i}' for i in range(600)])\n"
            "failed = [a for a in answers if a.startswith('Error')]\nprint(len(answers), len(failed), failed[:2])\n```",
            "FINAL(done)",
        ]
        # 256 connections at once can outrun the fake server's listen backlog here.
        rlm = _served(server, max_concurrency=32)
        events: list[Event] = []
        async with StallProbe() as probe:
            result = await rlm.acompletion("context", "question", callbacks=[_cells_into(events)])
    assert result.finish_reason == "final"
    assert "600 0 []" in _output(events) and server.counters.leaf_requests == 600
    probe.check()


async def test_the_deadline_ends_a_batch_being_made() -> None:
    """No sub-call answers before the run's deadline: the batch is still being made when it comes."""
    with FakeOpenAIServer(latency=30, root_latency=0) as server:
        server.root = ["```repl\nanswers = llm_query_batched(['x'] * 10_000)\nprint(len(answers))\n```", "FINAL(done)"]
        rlm = _served(server, timeout=4)
        started: list[SubCallStarted] = []
        began = time.monotonic()
        result = await rlm.acompletion(
            "context", "question", callbacks=[lambda e: started.append(e) if isinstance(e, SubCallStarted) else None]
        )
        took = time.monotonic() - began
    assert result.finish_reason == "timeout"
    # Past the deadline: the cell's end, 256 requests cancelled and the worker restarted. The bound tells a run
    # ended by its deadline from one that waited for the 30 s replies, with room for a machine at a load of 8.
    assert took < 4 + 12, f"a run with timeout=4 took {took:.1f} s"
    assert len(started) <= DEFAULTS.max_concurrency  # main started all 10,000 before the first answer
