"""`rlm ask --sources` and `rlm ask --json` name the lines the answer comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.tree import Tree
from rlm_adapters.core.trajectory import SOURCES_RECORD
from rlm_adapters.testing import FakeOpenAIServer
from tests import planted
from tests.cli.test_cli import RLM_BIN, run_rlm, server_env

pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
ARGS = ["ask", "--context", "src", "--environment", "local", "What are the rollout passwords?"]


def _env(fake_server: FakeOpenAIServer) -> dict[str, str]:
    return {**server_env(fake_server), "RLM_SUB_MODEL": "leaf-model"}


@pytest.mark.slow
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


@pytest.mark.slow
def test_rlm_ask_json_carries_the_sources(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    fake_server.root = planted.root()
    done = run_rlm([*ARGS, "--json"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert {(s["path"], s["line_start"], s["line_end"]) for s in result["sources"]} == planted.expected()
    keys = {"path", "line_start", "line_end", "chars", "excerpt", "place", "char_start", "char_end"}
    assert all(set(s) == keys and s["char_start"] is None for s in result["sources"])  # lines short: no range


@pytest.mark.slow
def test_rlm_ask_single_file_sources_use_its_name(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("intro\n" + planted.fact("QUAIL-3141") + "\noutro\n")
    fake_server.root = [
        planted.FIND.replace('docs[0]["text"]', "docs[0]").replace('d["text"]', "d"),
        "FINAL(QUAIL-3141)",
    ]
    done = run_rlm(["ask", "-c", "notes.txt", "--environment", "local", "--sources", "q"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "QUAIL-3141\n\nSources:\n- notes.txt:2\n"


@pytest.mark.slow
def test_rlm_ask_flags_a_made_up_number_and_one_no_model_read(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    fake_server.root = planted.root(fabricated=True)
    done = run_rlm([*ARGS, "--json"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["response"] == planted.FABRICATED_TEXT
    planted.check_flags(result["claims"])
    fake_server.root = planted.root(fabricated=True)
    done = run_rlm([*ARGS, "--sources", "--log-dir", "logs"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    last = done.stdout.rstrip("\n").splitlines()[-1]
    assert (
        last.startswith("Unsupported: ") and f'"{planted.FABRICATED_NUMBER}" (in no text that reached a model)' in last
    )
    # `rlm view` shows the run's sources and the claims it flagged, from the trajectory log.
    [log] = (tmp_path / "logs").glob("*.jsonl")
    shown = run_rlm(["view", str(log)], _env(fake_server), tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "sources: src/pkg_007/mod_007.txt:12" in shown.stdout
    assert planted.FABRICATED_NUMBER in shown.stdout and "unsupported claims (3)" in shown.stdout


@pytest.mark.slow
def test_rlm_ask_sources_over_a_generated_tree_cites_the_planted_files_and_lines(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    tree = Tree(3)  # 300 files of about 10 KB; the benchmark runs the same at 200 MB and 1 GB
    tree.write(tmp_path)
    fake_server.root = planted.root()
    done = run_rlm([*ARGS, "--sources"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    answer, block = done.stdout.rstrip("\n").split("\n\n")
    assert answer == "The rollout passwords are " + ", ".join(tree.codes()) + "."
    assert block.splitlines()[0] == "Sources:"
    assert set(block.splitlines()[1:]) == {f"- {path}:{line}" for path, line in tree.expected()}


def test_rlm_ask_without_sources_or_json_computes_none(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    fake_server.root = planted.root()
    done = run_rlm([*ARGS, "--log-dir", "logs"], _env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == planted.ANSWER_TEXT + "\n"
    [log] = (tmp_path / "logs").glob("*.jsonl")
    assert json.loads(log.read_text().splitlines()[-1])["type"] != SOURCES_RECORD  # the run was never cited
