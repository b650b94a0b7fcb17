"""Issue 47: the answer first, always. Sources are a run observer that never holds the answer back.

The engine tells every observer the answer exists before any of them is asked to finish; their work gets the
run's ``sources_timeout``, and what is cut there (or when the caller stops waiting) keeps what it finished and
says what it did not. ``rlm ask`` prints the answer the moment it exists: a Ctrl-C or a SIGTERM in the sources
phase keeps it on stdout, with one line saying the sources were not finished; before the fix the answer was
printed after the sources, and SIGINT then exited 130 with nothing on stdout.

The sources phase is held open by a gate the test opens (a threading.Event): no test sleeps to wait for it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.cli import main
from rlm_adapters.core import Event, Observer, RLMResult
from rlm_adapters.core.adapter_kit import INTERRUPTED
from rlm_adapters.sources import SourceTracker
from rlm_adapters.testing import FakeOpenAIServer, by_turn
from tests.held_sources import ANSWER, FIND, TEXT, held_claims


class Recorder(Observer):
    """Records what the engine tells it, in order."""

    def __init__(self, name: str, heard: list[str]) -> None:
        self.name = name
        self.heard = heard

    def started(self, run_id: str) -> None:
        self.heard.append(f"{self.name} started")

    def event(self, event: Event) -> None:
        if event.kind == "final" and event.depth == 0:
            self.heard.append(f"{self.name} final event")

    async def answered(self, result: RLMResult) -> None:
        self.heard.append(f"{self.name} answered {result.response}")

    async def finished(self, result: RLMResult) -> None:
        self.heard.append(f"{self.name} finished")

    def unfinished(self, result: RLMResult, why: str) -> None:
        self.heard.append(f"{self.name} unfinished: {why}")

    def failed(self, error: BaseException) -> None:
        self.heard.append(f"{self.name} failed: {type(error).__name__}")


class Stuck(Recorder):
    """An observer whose work never ends by itself."""

    async def finished(self, result: RLMResult) -> None:
        self.heard.append(f"{self.name} finishing")
        await asyncio.Event().wait()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds every `SourceTracker` at its claim checks (its sources found) until the test sets it."""
    with held_claims(monkeypatch) as opened:
        yield opened


def _rlm(**options: Any) -> RLM:
    return RLM(
        backend=by_turn(FIND, f"FINAL({ANSWER})"), other_backends=[by_turn("ok")], environment="local", **options
    )


async def test_every_observer_hears_the_answer_before_any_is_asked_to_finish() -> None:
    heard: list[str] = []
    result = await _rlm().acompletion(TEXT, "the code?", observers=[Recorder("a", heard), Recorder("b", heard)])
    assert heard == [
        "a started",
        "b started",
        "a final event",
        "b final event",
        f"a answered {ANSWER}",
        f"b answered {ANSWER}",
        "a finished",
        "b finished",
    ]
    assert result.response == ANSWER and "unfinished" not in result.metadata


async def test_an_observer_past_the_bound_is_cut_and_named_and_the_answer_returned() -> None:
    heard: list[str] = []
    rlm = _rlm(sources_timeout=0.05)
    result = await rlm.acompletion(TEXT, "the code?", observers=[Stuck("slow", heard), Recorder("quick", heard)])
    assert result.response == ANSWER and result.finish_reason == "final"
    assert result.metadata["unfinished"] == {"slow": "cut at 0.05 s (sources_timeout)"}
    assert heard[-2:] == ["quick finished", "slow unfinished: cut at 0.05 s (sources_timeout)"]


async def test_a_caller_that_stops_waiting_in_the_sources_phase_cuts_the_observers_not_the_run() -> None:
    heard: list[str] = []
    call = asyncio.ensure_future(_rlm().acompletion(TEXT, "the code?", observers=[Stuck("slow", heard)]))
    while "slow finishing" not in heard:  # the run itself is over: its observers are at work
        await asyncio.sleep(0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert heard[-1] == f"slow unfinished: {INTERRUPTED}"


async def test_a_run_stopped_before_its_answer_tells_its_observers_it_failed() -> None:
    heard: list[str] = []
    reached = asyncio.Event()

    async def hang(event: Event) -> None:  # the run is held at its first event, then its caller leaves
        reached.set()
        await asyncio.Event().wait()

    call = asyncio.ensure_future(_rlm().acompletion(TEXT, "q", callbacks=[hang], observers=[Recorder("a", heard)]))
    await reached.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert heard == ["a started", "a failed: CancelledError"]


async def test_the_tracker_cut_at_its_claims_keeps_its_sources_and_says_the_claims_were_not_checked(
    gate: threading.Event,
) -> None:
    tracker = SourceTracker(TEXT)
    result = await _rlm(sources_timeout=0.3).acompletion(TEXT, "the code?", observers=[tracker])
    assert result.response == ANSWER
    assert [source.location for source in result.sources] == ["context:201"]
    assert result.claims == []  # not "none unsupported": not checked, and said so
    assert result.sources_note == "sources not finished, cut at 0.3 s (sources_timeout): the claims were not checked"
    assert result.metadata["unfinished"] == {"sources": "cut at 0.3 s (sources_timeout)"}


# -- rlm ask ------------------------------------------------------------------------------------------------
@pytest.fixture
def ask(fake_server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """``rlm ask --sources`` over a file whose line 201 holds the code, run in this process."""
    (tmp_path / "notes.txt").write_text(TEXT)
    fake_server.root = [FIND, f"FINAL({ANSWER})"]
    for name in [k for k in os.environ if k.startswith(("RLM_", "OPENAI_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RLM_MODEL", "root-model")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.chdir(tmp_path)
    yield ["ask", "-c", "notes.txt", "--environment", "local", "--quiet", "--no-cache", "--sources", "the code?"]


def test_rlm_ask_prints_the_answer_before_its_sources_are_found(
    ask: list[str], gate: threading.Event, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    printed: list[str] = []
    findings = SourceTracker.findings

    def looking(self: SourceTracker, *args: Any, **kwargs: Any) -> Any:
        printed.append(sys.stdout.getvalue())  # type: ignore[attr-defined]  # what stdout held when they began
        gate.set()
        return findings(self, *args, **kwargs)

    monkeypatch.setattr(SourceTracker, "findings", looking)
    assert main(ask) == 0
    assert printed == [f"{ANSWER}\n"]  # the answer was out before the sources were looked for
    out = capsys.readouterr().out
    assert out.startswith(f"{ANSWER}\n\nSources:\n- notes.txt:201\n") and '"4242"' in out  # then, as before


@pytest.mark.parametrize(("sent", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_in_the_sources_phase_keeps_the_answer_and_says_the_sources_were_not_finished(
    ask: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, sent: signal.Signals, code: int
) -> None:
    """``timeout 300 rlm ask ...`` sends SIGTERM; Ctrl-C, SIGINT. Either one, once the answer is printed."""
    findings = SourceTracker.findings
    opened = threading.Event()

    def interrupted(self: SourceTracker, *args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), sent)  # while the sources are being found: held here until the test is over
        opened.wait(timeout=60)
        return findings(self, *args, **kwargs)

    monkeypatch.setattr(SourceTracker, "findings", interrupted)
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGTERM, lambda *_: pytest.fail("SIGTERM reached the default handler"))
    # As a fresh `rlm ask` has it: asyncio.run turns Ctrl-C into a cancel only over Python's default handler, and
    # a test before this one in the worker (an in-process server's) may have left another.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(ask) == code
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
        opened.set()
    assert capsys.readouterr().out == (
        f"{ANSWER}\n\nSources: none (sources not finished, interrupted: neither sources nor claims: the texts that "
        "reached a model were still being matched)\n"
    )


def test_rlm_ask_past_its_sources_timeout_prints_the_answer_and_what_was_not_finished(
    ask: list[str], gate: threading.Event, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*ask[:-1], "--sources-timeout", "0.3", ask[-1]]) == 0
    assert capsys.readouterr().out == (
        f"{ANSWER}\n\nSources:\n- notes.txt:201\n"
        "(sources not finished, cut at 0.3 s (sources_timeout): the claims were not checked)\n"
    )
