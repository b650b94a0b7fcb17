"""`rlm view` and `rlm export` as registered on an argparse parser."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from rlm_adapters.cli.view import add_parser, resolve
from rlm_adapters.core.result import Claim, Place, Source
from rlm_adapters.core.trajectory import SOURCES_RECORD, append_record
from rlm_adapters.sources import Findings
from tests.viewer.conftest import RecordRun


def _run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="rlm")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    code: int = args.func(args)
    return code


def test_view_accepts_a_file_a_folder_or_a_trajectory_id(
    record_run: RecordRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = record_run(query="older run")
    newer = record_run(query="newer run")
    os.utime(older, (1, 1))  # both logs may share a second-resolution stamp: age one explicitly
    logs = newer.parent
    assert resolve(str(logs)) == newer
    run_id = json.loads(older.read_text().splitlines()[0])["run_id"]
    assert resolve(run_id[:12], logs) == older

    assert _run("view", str(older), "--no-color") == 0
    assert "query: older run" in capsys.readouterr().out
    assert _run("view", str(logs), "--no-color") == 0
    assert "query: newer run" in capsys.readouterr().out
    assert _run("view", run_id, "--log-dir", str(logs), "--no-color") == 0
    assert "query: older run" in capsys.readouterr().out

    assert _run("view", "0123456789abcdef", "--log-dir", str(logs)) == 2
    assert "not a log file, a folder of logs, or a run id" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _run("view", str(empty)) == 2


def test_view_html_writes_the_page(recorded_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "page.html"
    assert _run("view", str(recorded_log), "--html", str(out)) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert f"wrote {out}" in capsys.readouterr().out


def test_export_writes_chat_jsonl_and_reports(
    record_run: RecordRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record_run(query="What is the answer?")
    record_run(query="Another question")
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"query": "What is the answer?", "answer": "42"}) + "\n", encoding="utf-8")
    out = tmp_path / "out" / "sft.jsonl"
    logs = str(tmp_path / "logs")
    assert _run("export", logs, "--format", "sft", "--only-correct", str(gold), "-o", str(out)) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["messages"][-1]["content"] == "FINAL(42)"
    assert "2 runs read, 1 kept, 1 examples; skipped: 1 no gold answer" in capsys.readouterr().err

    assert _run("export", logs, "--finish-reason", "any", "--sub-calls", "--include-context") == 0
    assert len(capsys.readouterr().out.splitlines()) == 2 * (1 + 4)
    assert _run("export", logs, "--sub-calls") == 2
    assert "--include-context" in capsys.readouterr().err


def test_view_and_export_read_a_log_with_its_sources_record_and_one_without(
    record_run: RecordRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = record_run(query="What is the answer?")  # a log as written before runs were cited
    cited = tmp_path / "cited" / old.name
    cited.parent.mkdir()
    cited.write_bytes(old.read_bytes())
    run_id = json.loads(old.read_text().splitlines()[0])["run_id"]
    findings = Findings(
        sources=[
            Source("docs/a.md", 0, 0, 0, ""),
            Source("docs/b.md", 3, 4, 20, "x"),
            Source("q3.pdf", 40, 40, 30, "y", Place("page", "7", None, 3, 3)),
        ],
        claims=[Claim("42", "number", "unsupported", 0, 2, reason="in no text that reached a model")],
    )
    append_record(cited, findings.record(run_id))
    last = json.loads(cited.read_text().splitlines()[-1])
    assert last["type"] == last["kind"] == SOURCES_RECORD  # a kind, like every record after the header

    assert _run("view", str(cited), "--no-color") == 0
    shown = capsys.readouterr().out
    assert "sources: docs/a.md, docs/b.md:3-4, q3.pdf:p7:L3" in shown and "in no text that reached a model" in shown
    assert _run("view", str(old), "--no-color") == 0
    assert "sources:" not in capsys.readouterr().out
    for log in (cited, old):
        assert _run("export", str(log)) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert json.loads(line)["messages"][-1]["content"] == "FINAL(42)"
