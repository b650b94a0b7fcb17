"""examples/mcp_client.py runs unchanged against the server and the local fake model server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import server_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_example_client_asks_about_a_folder(workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_server.root = lambda messages: (
        '```repl\nhits = [a for a in llm_query_batched([d["text"] for d in context]) if a != "NONE"]\n'
        "FINAL(hits[0])\n```"
    )
    (workspace / "picture.bin").write_bytes(b"\x00\x01binary")
    env = server_env(fake_server, tmp_path / "logs")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_client.py"), str(workspace), "What is the magic number?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4242\n\nSources:\n- docs/a.md:1"
    assert "iteration 1/30" in done.stderr  # progress was printed
    assert "final after 1 iterations, 3 sub-calls" in done.stderr
    assert "read: docs/a.md, docs/b.md, notes.txt" in done.stderr
    assert "skipped picture.bin: binary file" in done.stderr
    assert "trajectory: rlm://trajectories/" in done.stderr


@pytest.mark.slow
def test_example_client_without_a_model_runs_on_the_bundled_fake_server(workspace: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "ANTHROPIC_"))}
    env["RLM_MCP_LOG_DIR"] = str(tmp_path / "logs")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_client.py"), str(workspace), "What is here?"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "RLM_MODEL is not set: using the bundled fake model at http://127.0.0.1:" in done.stderr
    assert done.stdout.strip() == (
        "(demo model, no RLM_MODEL set) read 3 files, 59 characters; the largest is docs/a.md; "
        "magic numbers found: ['4242']\n\nSources:\n- docs/a.md:1\n"
        # The demo's own words are in no input: they are flagged, the number and the file name are not.
        'Unsupported: "(demo model, no RLM_MODEL set) read 3 files, 59 characters; the largest is docs…" '
        '(no line that reached a model holds most of its words); "RLM_MODEL" (in no text that reached a model)'
    )
    assert "final after 2 iterations, 3 sub-calls" in done.stderr
    assert list((tmp_path / "logs").glob("*.jsonl"))
