"""`rlm ask --schema FILE.json`: the answer validated against the schema and printed as JSON; bad files refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.cli.test_cli import RLM_BIN, run_rlm, server_env

pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")

SCHEMA = {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}


@pytest.mark.slow
def test_the_value_is_printed_as_json(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one two three\n", encoding="utf-8")
    (tmp_path / "answer.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    fake_server.root = [
        '```repl\nFINAL_VAR({"count": "three"})\n```',
        '```repl\nFINAL_VAR({"count": len(context.split())})\n```',
    ]
    done = run_rlm(
        ["ask", "-c", "a.txt", "--schema", "answer.json", "-q", "how many words?"], server_env(fake_server), tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"count": 3}
    as_json = run_rlm(
        ["ask", "-c", "a.txt", "--schema", "answer.json", "--json", "how many words?"],
        server_env(fake_server),
        tmp_path,
    )
    assert json.loads(as_json.stdout)["value"] == {"count": 3}


@pytest.mark.slow
def test_no_valid_value_exits_1_saying_why(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("text\n", encoding="utf-8")
    (tmp_path / "answer.json").write_text(json.dumps(SCHEMA), encoding="utf-8")
    fake_server.root = ['```repl\nFINAL_VAR({"total": 1})\n```']
    done = run_rlm(["ask", "-c", "a.txt", "--schema", "answer.json", "-q", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 1
    assert "missing the required key 'count'" in done.stderr and "finish_reason='error'" in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "--schema 'answer.json': cannot read it"),
        ("{not json", "--schema 'answer.json' is not JSON"),
        ('["a list"]', "--schema 'answer.json' must hold a JSON schema (an object), got a list"),
        ('{"type": "object", "unevaluatedProperties": false}', "the keyword 'unevaluatedProperties' is not supported"),
    ],
)
def test_a_bad_schema_file_is_one_line_before_any_call(
    fake_server: FakeOpenAIServer, tmp_path: Path, content: str | None, message: str
) -> None:
    (tmp_path / "a.txt").write_text("text\n", encoding="utf-8")
    if content is not None:
        (tmp_path / "answer.json").write_text(content, encoding="utf-8")
    done = run_rlm(["ask", "-c", "a.txt", "--schema", "answer.json", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert fake_server.counters.requests == 0
