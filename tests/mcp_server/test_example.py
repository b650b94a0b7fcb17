"""examples/mcp_client.py runs unchanged against the server and the local fake model server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import server_env

ROOT = Path(__file__).resolve().parents[2]


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
