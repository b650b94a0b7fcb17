"""Trajectories as chat-format JSONL for fine-tuning (`rlm export RUNS... --format sft`).

Each kept run becomes one conversation: the messages its root model was sent, turn by turn, and its
replies as the assistant's turns, which is what a smaller model is trained to imitate. Sub-calls can be
added as their own one-turn examples. Runs are filtered by finish reason, by a gold answer file and by
turn count.

The context itself is never in a log, but its preview is (the root model is shown the input's first
characters) and code may print parts of it. Unless `include_context` is set, every stretch of a
message that matches the logged previews is replaced by a placeholder; sub-call prompts are mostly
pieces of the context, so sub-call examples are only written when `include_context` is set.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from rlm_adapters._terminal import json_line
from rlm_adapters.viewer.log_build import load
from rlm_adapters.viewer.log_tree import Run, Trajectory, is_truncated

REDACTED = "[context omitted]"
WINDOW = 24
PREVIEW_BLOCK = re.compile(r"(<preview>\n?)(.*?)(\n?</preview>)", re.DOTALL)
MatchMode = Literal["exact", "contains"]


def normalize_answer(text: str) -> str:
    """`text` lowercased, whitespace collapsed and surrounding quotes and punctuation stripped."""
    return " ".join(text.lower().split()).strip(" \t\"'`.,;:!?()[]{}")


def _gold_line(line: str) -> tuple[dict[str, Any], list[Any]] | None:
    """A gold line's object and its answers; None when it is not one."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not ("run_id" in record or "query" in record):
        return None
    answers = record.get("answers", record.get("answer"))
    if isinstance(answers, str | int | float):
        answers = [answers]
    return (record, answers) if isinstance(answers, list) else None


@dataclass
class Gold:
    """Correct answers by run id and by query, read from a JSONL file.

    Each line is `{"answer": "..."}` or `{"answers": [...]}` with a `"run_id"` or a `"query"` (or both).
    """

    by_run: dict[str, list[str]] = field(default_factory=dict)
    by_query: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: str | Path) -> Gold:
        """Read a gold answer file."""
        gold = cls()
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
            if not line.strip():
                continue
            parsed = _gold_line(line)
            if parsed is None:
                raise ValueError(
                    f"{path}:{number}: a gold line needs 'answer' (or 'answers') and 'run_id' or 'query', "
                    f"got {line[:120]!r}"
                )
            record, answers = parsed
            values = [str(answer) for answer in answers]
            if "run_id" in record:
                gold.by_run[str(record["run_id"])] = values
            if "query" in record:
                gold.by_query[str(record["query"]).strip()] = values
        return gold

    def answers_for(self, run: Run) -> list[str] | None:
        """The gold answers of `run` (by id first, then by query), or None if it has none."""
        found = self.by_run.get(run.run_id)
        if found is None and run.query is not None:
            found = self.by_query.get(run.query.strip())
        return found

    def is_correct(self, run: Run, mode: MatchMode = "exact") -> bool | None:
        """Whether the run's answer matches its gold answer (None if the file has no answer for it)."""
        answers = self.answers_for(run)
        if answers is None:
            return None
        response = normalize_answer(run.response or "")
        golds = [normalize_answer(answer) for answer in answers]
        if mode == "contains":
            return any(gold and gold in response for gold in golds)
        return response in golds


@dataclass
class ExportOptions:
    """Which runs become examples and what goes into them.

    Attributes:
        finish_reasons: Keep runs that ended for one of these reasons (None keeps any).
        gold: Keep only runs whose answer matches the gold file.
        match: How an answer is compared with the gold one.
        min_turns: Keep runs with at least this many root turns.
        max_turns: Keep runs with at most this many root turns.
        sub_calls: Also write each finished `llm_query` as a one-turn example (needs `include_context`).
        nested: Also write the conversations of nested RLM runs of kept runs.
        include_context: Keep context text (the preview and what code printed of it) in the examples.
        allow_truncated: Keep conversations that contain texts the log cut.
        metadata: Add a `metadata` object (run id, finish reason, turns, source file) to each line.
    """

    finish_reasons: frozenset[str] | None = frozenset({"final"})
    gold: Gold | None = None
    match: MatchMode = "exact"
    min_turns: int | None = None
    max_turns: int | None = None
    sub_calls: bool = False
    nested: bool = False
    include_context: bool = False
    allow_truncated: bool = False
    metadata: bool = False


@dataclass
class ExportStats:
    """What an export read, kept and skipped (and why)."""

    runs: int = 0
    kept: int = 0
    examples: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


class Redactor:
    """Replaces every stretch of text that matches a known piece of context with a placeholder."""

    def __init__(self, pieces: Iterable[str]) -> None:
        self.windows: set[str] = set()
        self.short: list[str] = []
        for piece in pieces:
            if len(piece) >= WINDOW:
                self.windows.update(piece[i : i + WINDOW] for i in range(len(piece) - WINDOW + 1))
            elif len(piece.strip()) >= 8:
                self.short.append(piece)

    def __call__(self, text: str) -> str:
        """`text` with known context replaced."""
        text = PREVIEW_BLOCK.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
        for piece in self.short:
            text = text.replace(piece, REDACTED)
        if not self.windows or len(text) < WINDOW:
            return text
        hidden = bytearray(len(text))
        for i in range(len(text) - WINDOW + 1):
            if text[i : i + WINDOW] in self.windows:
                hidden[i : i + WINDOW] = b"\x01" * WINDOW
        if not any(hidden):
            return text
        out: list[str] = []
        for i, char in enumerate(text):
            if not hidden[i]:
                out.append(char)
            elif i == 0 or not hidden[i - 1]:
                out.append(REDACTED)
        return "".join(out)


def _context_pieces(trajectory: Trajectory) -> list[str]:
    pieces = [str((trajectory.header.get("context") or {}).get("preview") or "")]
    pieces += [str(run.context.get("preview") or "") for run in trajectory.runs.values()]
    return [piece for piece in pieces if piece]


def conversation(run: Run) -> list[dict[str, str]]:
    """The root model's whole conversation in `run`: what it was sent each turn, and its replies."""
    messages: list[dict[str, str]] = []
    for item in run.iterations:
        if item.turn is None:
            continue
        messages.extend({"role": m["role"], "content": m["content"]} for m in item.turn.messages_sent)
        messages.append({"role": "assistant", "content": item.turn.reply})
    return messages


def _skip_reason(run: Run, options: ExportOptions) -> str | None:
    if not run.finished:
        return "unfinished"
    if options.finish_reasons is not None and run.finish_reason not in options.finish_reasons:
        return f"finish reason {run.finish_reason}"
    turns = sum(item.turn is not None for item in run.iterations)
    if options.min_turns is not None and turns < options.min_turns:
        return "too few turns"
    if options.max_turns is not None and turns > options.max_turns:
        return "too many turns"
    if options.gold is not None:
        correct = options.gold.is_correct(run, options.match)
        if correct is None:
            return "no gold answer"
        if not correct:
            return "wrong answer"
    return None


def examples(
    trajectory: Trajectory, options: ExportOptions, stats: ExportStats | None = None
) -> Iterator[dict[str, Any]]:
    """The chat examples of one trajectory that pass `options` (counted into `stats`)."""
    stats = stats if stats is not None else ExportStats()
    if options.sub_calls and not options.include_context:
        raise ValueError("sub-call prompts are pieces of the context: sub-call examples need include_context")
    stats.runs += 1
    top = trajectory.root
    reason = _skip_reason(top, options)
    if reason is not None:
        stats.skipped[reason] += 1
        return
    stats.kept += 1
    redact = (lambda text: text) if options.include_context else Redactor(_context_pieces(trajectory))
    runs = [run for run in trajectory.all_runs() if options.nested or run is top]
    for run in runs:
        messages = conversation(run)
        if not messages:
            continue
        if not options.allow_truncated and any(is_truncated(m["content"]) for m in messages):
            stats.skipped["truncated in the log"] += 1
            continue
        turns = sum(item.turn is not None for item in run.iterations)
        yield _line(
            [{"role": m["role"], "content": redact(m["content"])} for m in messages],
            options,
            trajectory,
            run,
            source="root",
            turns=turns,
        )
        stats.examples += 1
        if not options.sub_calls:
            continue
        for batch in run.batches():
            for call in batch.calls:
                if call.kind != "llm_query" or call.response is None or call.error is not None:
                    continue
                if not options.allow_truncated and (is_truncated(call.prompt) or is_truncated(call.response)):
                    stats.skipped["truncated in the log"] += 1
                    continue
                pair = [
                    {"role": "user", "content": call.prompt},
                    {"role": "assistant", "content": call.response},
                ]
                yield _line(pair, options, trajectory, run, source="sub_call", turns=1, model=call.model)
                stats.examples += 1


def _line(
    messages: list[dict[str, str]],
    options: ExportOptions,
    trajectory: Trajectory,
    run: Run,
    *,
    source: str,
    turns: int,
    model: str | None = None,
) -> dict[str, Any]:
    line: dict[str, Any] = {"messages": messages}
    if options.metadata:
        line["metadata"] = {
            "run_id": run.run_id,
            "depth": run.depth,
            "source": source,
            "model": model or run.root_model,
            "finish_reason": run.finish_reason,
            "turns": turns,
            "log": str(trajectory.path) if trajectory.path is not None else None,
        }
    return line


def export(paths: Iterable[str | Path], out: TextIO, options: ExportOptions) -> ExportStats:
    """Write the examples of every log in `paths` to `out`, one JSON object a line (`json_line`: no character a
    terminal acts on appears raw, and the values read back unchanged).

    Args:
        paths: Trajectory log files.
        out: Where the JSONL goes.
        options: The filters and what to include.

    Returns:
        Counts of runs read, kept and skipped (by reason) and of examples written.
    """
    stats = ExportStats()
    for path in paths:
        for line in examples(load(path), options, stats):
            out.write(json_line(line) + "\n")
    return stats
