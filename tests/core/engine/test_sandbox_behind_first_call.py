"""A level's own sandbox opens while its first root call is in flight (issue 53), keeping every guarantee:
the run's start event comes first, and a sandbox that cannot open fails the run clearly without losing the
paid call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import rlm_adapters.core.engine.level_sandbox as level_sandbox
from rlm_adapters import RLM, Event, Message, SandboxError, ScriptedModel
from rlm_adapters.core.lm.scripted import Reply

OPEN_WAIT = 10.0  # a root call that waited for the sandbox would never set `root_called`: fail, don't hang


class SandboxAfterRoot:
    """`open_sandbox` that opens only once the root model was called, or fails then with `error`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, error: Exception | None = None) -> None:
        self.root_called: asyncio.Event | None = None
        self.error = error
        self.wait = True  # False: open at once (a replayed root call calls no model)
        self.real = level_sandbox.open_sandbox
        monkeypatch.setattr(level_sandbox, "open_sandbox", self.open)

    def root(self, replies: list[str]) -> ScriptedModel:
        def reply(messages: list[Message]) -> Reply:
            assert self.root_called is not None
            self.root_called.set()
            return replies[min(sum(m["role"] == "assistant" for m in messages), len(replies) - 1)]

        return ScriptedModel(reply, model_name="root")

    async def open(self, kind: str, options: dict[str, Any] | None = None) -> Any:
        assert self.root_called is not None
        if self.wait:
            await asyncio.wait_for(self.root_called.wait(), OPEN_WAIT)
        if self.error is not None:
            raise self.error
        return await self.real(kind, options)

    async def run(self, rlm: RLM, events: list[Event]) -> Any:
        self.root_called = asyncio.Event()
        return await rlm.acompletion("the context", "q", callbacks=[events.append])


async def test_the_first_root_call_goes_out_before_the_sandbox_opens_and_the_start_event_stays_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    patched = SandboxAfterRoot(monkeypatch)
    rlm = RLM(backend=patched.root(["```repl\nprint(len(context))\n```", "FINAL(done)"]), environment="local")
    events: list[Event] = []
    result = await patched.run(rlm, events)
    assert (result.response, result.finish_reason) == ("done", "final")
    kinds = [e.kind for e in events]
    assert kinds[:3] == ["run_start", "root_call", "cell"], kinds
    assert events[0].isolation == result.metadata["isolation"]  # type: ignore[attr-defined]
    assert kinds[-1] == "final"


async def test_a_sandbox_that_cannot_open_fails_the_run_and_the_paid_root_call_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    patched = SandboxAfterRoot(monkeypatch, SandboxError("the sandbox host refused: no room"))
    root = patched.root(["```repl\nprint(len(context))\n```", "FINAL(done)"])
    cache = tmp_path / "calls.sqlite"
    events: list[Event] = []
    with pytest.raises(SandboxError, match="no room"):
        await patched.run(RLM(backend=root, environment="local", cache=cache), events)
    assert len(root.calls) == 1
    assert events == []  # no run started: nothing of it is reported, not a root call without its run

    # The sandbox comes back: the paid first turn is replayed, not bought again.
    patched.error, patched.wait = None, False
    result = await patched.run(RLM(backend=root, environment="local", cache=cache), events)
    assert result.finish_reason == "final"
    assert len(root.calls) == 2  # the second turn only
    assert [e.kind for e in events][:2] == ["run_start", "root_call"]


async def test_a_final_answer_in_the_first_reply_still_waits_for_the_sandbox_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    patched = SandboxAfterRoot(monkeypatch)
    rlm = RLM(backend=patched.root(["FINAL(at once)"]), environment="local")
    events: list[Event] = []
    result = await patched.run(rlm, events)
    assert result.response == "at once"
    assert [e.kind for e in events] == ["run_start", "root_call", "final"]


async def test_a_sandbox_that_cannot_open_fails_the_run_even_when_the_first_reply_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A setup whose sandbox cannot start is refused as it was before the overlap: a lucky first reply that
    # needed no code does not hide it (the next question would need the sandbox).
    patched = SandboxAfterRoot(monkeypatch, SandboxError("docker is not running"))
    events: list[Event] = []
    with pytest.raises(SandboxError, match="docker is not running"):
        await patched.run(RLM(backend=patched.root(["FINAL(at once)"]), environment="local"), events)
    assert events == []
