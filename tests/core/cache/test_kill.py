"""A Python program killed with SIGKILL inside a nested RLM, run again with the same cache, finishes for free."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.killed import LedgerServer, kill_when

PARENT = [
    "```repl\nkid = rlm_query('child task', context='the context of the child ' * 10)\nprint(kid)\n```",
    "```repl\nFINAL('the child said ' + kid)\n```",
]
CHILD = [
    "```repl\nx = llm_query_batched([f'the magic number is {3000 + i}' for i in range(3)])\nprint(x)\n```",
    "```repl\ny = llm_query('the magic number is 4000')\nprint(y)\n```",
    "```repl\nFINAL(str(sum(int(v) for v in x) + int(y)))\n```",
]
ANSWER = f"the child said {3000 + 3001 + 3002 + 4000}"
PROGRAM = """
import sys
from rlm_adapters import RLM

url, cache = sys.argv[1], sys.argv[2]
options = {"base_url": url, "api_key": "sk-planted-in-backend-kwargs", "max_retries": 0,
           "default_headers": {"Authorization": "Bearer planted-header-token"}}
rlm = RLM(backend="openai", backend_kwargs={"model_name": "root-model", **options},
          other_backends=["openai"], other_backend_kwargs=[{"model_name": "leaf-model", **options}],
          max_depth=2, cache=cache)
result = rlm.completion("the parent context " * 20, "What does the child say?")
print(result.response)
print(result.usage_summary.to_dict()["total"]["cached_calls"], file=sys.stderr)
"""


def root(messages: list[dict[str, Any]]) -> str:
    script = CHILD if "child task" in str(messages[1]["content"]) else PARENT
    return script[min(sum(m["role"] == "assistant" for m in messages), len(script) - 1)]


def the_single_call(request: dict[str, Any]) -> bool:
    """The child's second sub-call: while it is out, nothing else is (the parent waits for the child)."""
    return "the magic number is 4000" in json.dumps(request["messages"])


@pytest.mark.timeout(400)
@pytest.mark.slow
def test_a_program_killed_in_a_nested_run_resumes_there_and_then_asks_nothing(tmp_path: Path) -> None:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    cache = tmp_path / "calls.sqlite"
    env = {**os.environ, "OPENAI_API_KEY": "sk-planted-in-the-environment"}
    with LedgerServer(root=root, latency=0.2) as server:
        command = [sys.executable, str(program), server.base_url, str(cache)]
        first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)  # fmt: skip
        answered = kill_when(server, first, the_single_call)
        assert first.returncode == -9
        assert len(answered) == 1 + 1 + 3 + 1  # parent turn 1, the child's turn 1, its batch, its turn 2

        server.forget()
        resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert resumed.returncode == 0, resumed.stderr
        assert resumed.stdout.strip() == ANSWER
        assert not set(server.arrived) & set(answered), "a call that had come back before the kill was paid again"
        assert len(server.arrived) == 3  # the cut-off sub-call, the child's last turn, the parent's last turn
        assert resumed.stderr.strip().splitlines()[-1] == "6"

        server.forget()
        third = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert third.returncode == 0 and third.stdout.strip() == ANSWER
        assert server.arrived == [] and third.stderr.strip().splitlines()[-1] == "9"

    held = b"".join(path.read_bytes() for path in tmp_path.glob("calls.sqlite*"))
    assert b"the child said" in held  # the replies are in it (even the parent's last code)
    for planted in (b"sk-planted-in-backend-kwargs", b"planted-header-token", b"sk-planted-in-the-environment"):
        assert planted not in held
    assert (cache.stat().st_mode & 0o777) == 0o600
