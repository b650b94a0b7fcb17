"""examples/quickstart.py runs unchanged against a real local OpenAI-compatible server."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[2]
COUNT_USERS = """```repl
from collections import Counter
counts = Counter(line.split()[2] for line in context.splitlines())
top = ", ".join(f"{user}: {n}" for user, n in counts.most_common(3))
print(top)
```"""


@pytest.mark.slow
def test_quickstart_against_the_local_server(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    fake_server.root = [COUNT_USERS, "FINAL_VAR(top)"]
    env = {**os.environ, "OPENAI_BASE_URL": fake_server.base_url, "OPENAI_API_KEY": "test", "RLM_MODEL": "m"}
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = completed.stdout.splitlines()
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from quickstart import make_log
    finally:
        sys.path.pop(0)
    expected = Counter(line.split()[2] for line in make_log().splitlines()).most_common(3)
    assert lines[0] == ", ".join(f"{user}: {n}" for user, n in expected)
    assert lines[1] == "finish reason: final"
    usage = ast.literal_eval(lines[2].removeprefix("usage: "))
    assert usage["total"]["calls"] == fake_server.counters.requests == 2
    assert list(tmp_path.glob("logs/rlm_*.jsonl"))
