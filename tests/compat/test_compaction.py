"""Compaction (the reference's ``compaction=True``): older root turns are summarised near the window."""

from __future__ import annotations

from rlm_adapters import Message, RootCall, ScriptedModel
from rlm_adapters.core.events import Event
from rlm_adapters.core.lm.scripted import Reply
from rlm_adapters.testing import turn_of

from .helpers import make


def compacting_root() -> ScriptedModel:
    def reply(messages: list[Message]) -> Reply:
        last = messages[-1]["content"]
        if last.startswith("Summarize your progress"):
            return "SUMMARY: x holds the running total; next, print it."
        if "compacted" in last:
            return "```repl\nFINAL(str(x))\n```"
        turn = turn_of(messages)
        return f"```repl\nx = {turn}\nprint('{'y' * 1500}')\n```"

    return ScriptedModel(reply, model_name="root")


def test_compaction_summarises_and_keeps_the_repl_state() -> None:
    events: list[Event] = []
    root = compacting_root()
    rlm = make(root, compaction=True, context_window=2000, compaction_threshold_pct=0.8, callbacks=[events.append])
    result = rlm.completion("c")
    assert result.finish_reason == "final"
    after = next(call for call in root.calls if "compacted" in call[-1]["content"])
    # system, the first user message, the summary, the note: the older turns are gone.
    assert [m["role"] for m in after] == ["system", "user", "assistant", "user"]
    assert after[2]["content"].startswith("SUMMARY:")
    # The variable set by the last code turn before compaction is still in the REPL.
    summary_at = next(i for i, call in enumerate(root.calls) if call[-1]["content"].startswith("Summarize"))
    assert result.response == str(summary_at - 1)
    summaries = [e for e in events if isinstance(e, RootCall) and e.reply.startswith("SUMMARY")]
    assert summaries and result.usage_summary.root.calls == len(root.calls)  # counted in usage


def test_no_compaction_by_default() -> None:
    root = compacting_root()
    result = make(root, context_window=2000, max_iterations=4).completion("c")
    assert all(not m[-1]["content"].startswith("Summarize") for m in root.calls)
    assert result.finish_reason == "max_iterations"
