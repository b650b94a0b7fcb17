"""Issue 48, item 11: a line of a JSON Lines file (or of code) ends at "\\n", never at U+2028 and its kind.

JSON writers leave U+2028, U+2029 and U+0085 raw inside strings (Python's with ``ensure_ascii=False``,
JavaScript's always), and `str.splitlines` breaks at them (and at \\x0b, \\x0c, \\x1c-\\x1e): a record is split
in two, both halves are lost or misread, and every later line number is off. Claude Code's transcripts are
pinned beside their reader (`tests/mcp_server/test_48_transcript_lines.py`); these are the package's other
readers of lines: the eval results, oolong-synth rows, the viewer's gold answers, .gitignore rules, and the
line numbers of a cell's traceback.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.runner import load_records
from rlm_adapters.evals.tasks.oolong_rows import load_rows
from rlm_adapters.files import load_paths
from rlm_adapters.viewer.export import Gold

BREAKS = "\u2028\u2029\u0085\x0c"  # each one a line break to `splitlines`, text to JSON and to git


def test_eval_results_keep_a_record_with_raw_line_separators(tmp_path: Path) -> None:
    records = [{"instance": "a", "answer": f"x{BREAKS}y"}, {"instance": "b", "answer": "z"}]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    assert load_records(path) == records


def test_oolong_rows_are_numbered_by_their_file_lines(tmp_path: Path) -> None:
    good = {"context_window_text": f"Date: Jan 01, 2023 || User: 1 || Instance: a{BREAKS}b", "question": "q",
            "answer": "['abbreviation']", "answer_type": "ANSWER_TYPE.LABEL", "context_len": 1024,
            "dataset": "trec_coarse"}  # fmt: skip
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(good, ensure_ascii=False) + "\n" + json.dumps({"question": "q"}) + "\n")
    with pytest.raises(ConfigurationError, match=r"rows\.jsonl' line 2 lacks"):
        load_rows(path)


def test_gold_answers_keep_a_query_with_raw_line_separators(tmp_path: Path) -> None:
    path = tmp_path / "gold.jsonl"
    path.write_text(json.dumps({"query": f"a{BREAKS}b", "answer": "42"}, ensure_ascii=False) + "\n", encoding="utf-8")
    assert list(Gold.read(path).by_query.values()) == [["42"]]


def test_a_gitignore_rule_is_one_git_line(tmp_path: Path) -> None:
    # Git reads "*.log\u2028!keep.log" as one rule (matching neither file); split at U+2028 it would be two,
    # and a.log would be left out.
    (tmp_path / ".gitignore").write_text("*.log\u2028!keep.log\nskip.txt\n", encoding="utf-8")
    for name in ("a.log", "keep.log", "skip.txt"):
        (tmp_path / name).write_text("x")
    assert sorted(f.path for f in load_paths(["."], [tmp_path]).files) == [".gitignore", "a.log", "keep.log"]


def test_a_cells_traceback_names_the_line_python_numbers() -> None:
    seen: list[str] = []

    def root(messages: Sequence[Any]) -> str:
        seen.append(str(messages[-1]["content"]))
        if len(seen) == 1:
            return f"```repl\ns = '{BREAKS}'\nraise ValueError('boom')\n```"
        return "FINAL(done)"

    RLM(backend=ScriptedModel(root, model_name="root"), environment="local").completion("context", "q?")
    assert "line 2, in <module>: raise ValueError('boom')" in seen[1], seen[1]
