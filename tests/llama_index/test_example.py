"""examples/llama_index_engine.py runs unchanged against a real local OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer

from .corpus import FACT_CODE, FACT_FILES, QUESTION, Corpus, leaf_policy, root_policy

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_example_answers_and_lists_exactly_the_files_it_read(
    fake_server: FakeOpenAIServer, corpus: Corpus, tmp_path: Path
) -> None:
    fake_server.root = root_policy()
    fake_server.leaf = leaf_policy
    env = {**os.environ, "OPENAI_BASE_URL": fake_server.base_url, "OPENAI_API_KEY": "test", "RLM_MODEL": "m"}
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "llama_index_engine.py"), str(corpus.folder), QUESTION],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == f"The launch code for Project Halcyon is {FACT_CODE}."
    assert lines[1] == "finish reason: final, cost: $0.0000"
    assert lines[2] == "sources (3 of 200 documents):"
    sizes = {name: len((corpus.folder / name).read_text(encoding="utf-8")) for name in FACT_FILES}
    assert lines[3:] == [f"  {name}: characters 0-{sizes[name]}" for name in sorted(FACT_FILES)]
    assert fake_server.counters.root_requests == 4 and fake_server.counters.leaf_requests == 3
