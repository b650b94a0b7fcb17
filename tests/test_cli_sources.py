"""`rlm ask --sources` and `rlm ask --json` name the lines the answer comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests import planted
from tests.test_cli import RLM_BIN, run_rlm, server_env

pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
ARGS = ["ask", "--context", "src", "--environment", "local", "What are the rollout passwords?"]


def _env(fake_server: FakeOpenAIServer) -> dict[str, str]:
    return {**server_env(fake_server), "RLM_SUB_MODEL": "leaf-model"}


def test_rlm_ask_sources_lists_path_and_lines_after_the_answer(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    fake_server.root = planted.root()
    done = run_rlm([*ARGS, "--sources"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    answer, block = done.stdout.rstrip("\n").split("\n\n")
    assert answer == planted.ANSWER_TEXT
    lines = block.splitlines()
    assert lines[0] == "Sources:"
    assert {line for line in lines[1:]} == {f"- {path}:{start}" for path, start, _ in planted.expected()}


def test_rlm_ask_json_carries_the_sources(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    fake_server.root = planted.root()
    done = run_rlm([*ARGS, "--json"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {(s["path"], s["line_start"], s["line_end"]) for s in result["sources"]} == planted.expected()
    assert all(set(s) == {"path", "line_start", "line_end", "chars", "excerpt", "place"} for s in result["sources"])


def test_rlm_ask_single_file_sources_use_its_name(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("intro\n" + planted.fact("QUAIL-3141") + "\noutro\n")
    fake_server.root = [
        planted.FIND.replace('docs[0]["text"]', "docs[0]").replace('d["text"]', "d"),
        "FINAL(QUAIL-3141)",
    ]
    done = run_rlm(["ask", "-c", "notes.txt", "--environment", "local", "--sources", "q"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "QUAIL-3141\n\nSources:\n- notes.txt:2\n"
