"""examples/langchain_chain.py runs unchanged against the local OpenAI-compatible server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.testing import FakeOpenAIServer, turn_of

ROOT = Path(__file__).resolve().parents[2]
SEARCH = """```repl
pieces = [context[i:i + 500_000] for i in range(0, len(context), 500_000)]
found = [a for a in llm_query_batched([question + '\\n\\n' + p for p in pieces]) if a != 'NONE']
answer = '; '.join(found)
print(len(pieces), answer)
```"""


def root(messages: list[dict[str, Any]]) -> str:
    """Reads the question ChatRLM quoted, searches the log in pieces, answers from what came back."""
    if turn_of(messages) == 0:
        question = re.search(r"Question: (.*)", str(messages[1]["content"]))
        assert question is not None, "ChatRLM should quote the user's question to the root model"
        return f"```repl\nquestion = {question.group(1)!r}\n```\n{SEARCH}"
    return "FINAL_VAR('answer')" if turn_of(messages) == 1 else "FINAL(no answer)"


def leaf(prompt: str) -> str:
    failure = re.search(r"ERROR (\S+): .*\(incident (\d+)\)", prompt)
    return f"{failure.group(1)} failed (incident {failure.group(2)})" if failure else "NONE"


@pytest.mark.slow
def test_the_example_chain_against_the_local_server(tmp_path: Path) -> None:
    with FakeOpenAIServer(root=root, leaf=leaf) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test", "RLM_MODEL": "m"}
        completed = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "langchain_chain.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        counters = server.counters
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "payments-db failed (incident 4471)"
    assert counters.root_requests == 2 and counters.leaf_requests >= 5  # 2.5 MB+ in 500,000-character pieces
