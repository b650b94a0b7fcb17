"""`rlm export`: chat-format JSONL, its filters, and no context text unless asked."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from rlm_adapters import Message
from rlm_adapters.viewer.export import REDACTED, ExportOptions, Gold, Redactor, export
from tests.viewer.conftest import CONTEXT_MARKER, SUB_RESULT, RecordRun


def _export(paths: list[Path], options: ExportOptions) -> list[dict[str, object]]:
    out = io.StringIO()
    export(paths, out, options)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _never_finishes(messages: list[Message]) -> str:
    return "```repl\nprint('still looking')\n```"


def test_root_turns_become_one_chat_conversation(recorded_log: Path) -> None:
    (line,) = _export([recorded_log], ExportOptions())
    assert set(line) == {"messages"}  # no extra keys by default: fine-tuning APIs reject them
    messages = line["messages"]
    assert isinstance(messages, list)
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)
    assert messages[-1]["content"] == "FINAL(42)"
    assert "llm_query_batched" in messages[4]["content"]


def test_finish_reason_gold_and_turn_filters(record_run: RecordRun, tmp_path: Path) -> None:
    good = record_run(query="What is the answer?")
    wrong = record_run(query="What is the other answer?")
    cut_off = record_run(root=_never_finishes, max_iterations=2, query="Never done")
    gold_file = tmp_path / "gold.jsonl"
    gold_file.write_text(
        json.dumps({"query": "What is the answer?", "answer": "42"})
        + "\n"
        + json.dumps({"query": "What is the other answer?", "answers": ["41", "forty-one"]})
        + "\n",
        encoding="utf-8",
    )
    logs = [good, wrong, cut_off]
    assert len(_export(logs, ExportOptions())) == 2  # default: only runs that ended with a final answer
    assert len(_export(logs, ExportOptions(finish_reasons=None))) == 3
    assert len(_export(logs, ExportOptions(finish_reasons=frozenset({"max_iterations"})))) == 1
    gold = Gold.read(gold_file)
    (kept,) = _export(logs, ExportOptions(gold=gold, metadata=True))
    assert kept["metadata"]["run_id"] == json.loads(good.read_text().splitlines()[0])["run_id"]  # type: ignore[index]
    assert _export(logs, ExportOptions(min_turns=4)) == []
    assert len(_export(logs, ExportOptions(max_turns=3))) == 2
    out = io.StringIO()
    stats = export(logs, out, ExportOptions(gold=gold))
    assert (stats.runs, stats.kept, stats.examples) == (3, 1, 1)
    assert stats.skipped == {"wrong answer": 1, "finish reason max_iterations": 1}


def test_gold_matches_by_run_id_and_contains_mode(recorded_log: Path, tmp_path: Path) -> None:
    run_id = json.loads(recorded_log.read_text().splitlines()[0])["run_id"]
    gold_file = tmp_path / "gold.jsonl"
    gold_file.write_text(json.dumps({"run_id": run_id, "answer": "The answer is 42."}) + "\n", encoding="utf-8")
    gold = Gold.read(gold_file)
    assert _export([recorded_log], ExportOptions(gold=gold)) == []  # "42" != "the answer is 42"
    assert _export([recorded_log], ExportOptions(gold=Gold(by_run={run_id: ["  42. "]})))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"answer": "42"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="needs 'answer'"):
        Gold.read(bad)


def test_no_context_text_unless_asked(recorded_log: Path) -> None:
    assert CONTEXT_MARKER in recorded_log.read_text(encoding="utf-8")  # the log has it: preview, output
    kept = _export([recorded_log], ExportOptions(nested=True, metadata=True))
    assert [line["metadata"]["depth"] for line in kept] == [0, 1]  # type: ignore[index]
    text = json.dumps(kept)
    assert CONTEXT_MARKER not in text and REDACTED in text
    everything = _export([recorded_log], ExportOptions(nested=True, include_context=True, sub_calls=True))
    assert CONTEXT_MARKER in json.dumps(everything[0])
    assert len(everything) == 1 + 4 + 1 + 1  # root, its 4 sub-calls, the nested run, its sub-call
    assert any(example["messages"][-1]["content"] == SUB_RESULT for example in everything)  # type: ignore[index]


def test_sub_call_examples_need_include_context(recorded_log: Path) -> None:
    with pytest.raises(ValueError, match="include_context"):
        _export([recorded_log], ExportOptions(sub_calls=True))


def test_truncated_conversations_are_skipped_unless_allowed(recorded_log: Path, tmp_path: Path) -> None:
    lines = recorded_log.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    turn = next(r for r in records if r.get("kind") == "root_call")
    turn["reply"] = turn["reply"] + "... [+1,234 chars]"
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    assert _export([cut], ExportOptions()) == []
    assert len(_export([cut], ExportOptions(allow_truncated=True))) == 1


def test_redactor_hides_every_long_enough_stretch_of_known_context() -> None:
    preview = "The quick brown fox jumps over the lazy dog near the riverbank at dawn."
    redact = Redactor([preview])
    assert redact(f"out: {preview[5:40]} end") == f"out: {REDACTED} end"
    assert redact("<preview>\nanything at all\n</preview>") == f"<preview>\n{REDACTED}\n</preview>"
    assert redact("nothing from the context here, just words.") == "nothing from the context here, just words."
