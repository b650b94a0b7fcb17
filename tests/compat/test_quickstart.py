"""The reference's quickstart (examples/quickstart.py of rlms 0.1.3, kept verbatim in reference/) runs
with only its import lines changed, against the local OpenAI-compatible server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rlm_adapters.testing import FakeOpenAIServer

REFERENCE = Path(__file__).parent / "reference" / "quickstart.py.txt"
IMPORTS = {
    "from rlm import RLM\n": "from rlm_adapters import RLM\n",
    "from rlm.logger import RLMLogger\n": "from rlm_adapters.logger import RLMLogger\n",
}
# A root model that finds the number with code and submits it the reference's way.
ROOT = [
    "```repl\nimport re\nfound = re.search(r'SECRET_NUMBER=(\\d+)', context).group(1)\nprint(found)\n```",
    "```repl\nanswer['content'] = found\nanswer['ready'] = True\n```",
]


def test_reference_quickstart_with_only_the_imports_changed(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    source = REFERENCE.read_text(encoding="utf-8")
    for old, new in IMPORTS.items():
        assert source.count(old) == 1
        source = source.replace(old, new)
    script = tmp_path / "quickstart.py"
    script.write_text(source, encoding="utf-8")
    fake_server.root = ROOT
    env = {**os.environ, "OPENAI_BASE_URL": fake_server.base_url, "OPENAI_API_KEY": "test"}
    completed = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "Correct: True" in completed.stdout.splitlines()
    assert fake_server.counters.root_requests == 2
    assert [r["model"] for r in fake_server.requests_log] == ["gpt-5-nano", "gpt-5-nano"]
    assert list((tmp_path / "logs").glob("rlm_*.jsonl"))
