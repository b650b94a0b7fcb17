"""What the models are sent depends only on their replies and on what the cells printed.

Resume replays a run from the cache only as long as each request equals the one the first run sent. So two
runs of the same scripted conversation must send byte-identical requests: no run ids, scratch paths, times,
durations or random names in any prompt. Each sandbox kind that can run here is checked, over a conversation
that touches every part of a prompt: the system prompt and context description, cell output, a traceback,
REPL variables, a batch of sub-calls, a nested RLM (its own sandbox and scratch), a restarted worker,
compaction and the last-chance turn.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.core.sandbox.docker import engine_problem
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import Response

IMAGE = os.environ.get("RLM_DOCKER_TEST_IMAGE", "rlm-sandbox-test:latest")
PREFIX = str(Path(sys.executable).resolve().parent.parent)
DOCKER = {"image": IMAGE, "python": str(Path(sys.executable).resolve()),
          "read_only_binds": {"/usr": "/usr", PREFIX: PREFIX}}  # fmt: skip
DOCKER_PROBLEM = engine_problem(IMAGE)

PARENT = [
    "```repl\nprint(type(context).__name__, len(context))\nnotes = {'a': 1}\nprint(notes['missing'])\n```",
    "```repl\nparts = llm_query_batched([f'count the word {w}' for w in ('x', 'y', 'y')])\nprint(parts)\n```",
    "```repl\nchild = rlm_query('summarise this', context='the child context ' * 20)\nprint(child)\n```",
    # The worker dies and restarts (not in-process, where it would end the test).
    "```repl\nimport os\nif not LOCAL:\n    os._exit(9)\n```",
    "```repl\nprint(sorted(globals().get('notes', {'gone': 0})))\n```",
]
CHILD = ["```repl\nprint(len(context))\n```", "FINAL(the child's summary)"]
_DONE = re.compile(r"Turn (\d+) of \d+ done|Summary: finished turn (\d+)")


def turns_done(messages: list[dict[str, Any]]) -> int:
    """Turns the conversation finished, read from its feedback (compaction drops the replies themselves)."""
    for message in reversed(messages):
        found = _DONE.search(str(message.get("content", "")))
        if found:
            return int(found.group(1) or found.group(2))
    return 0


class RecordingServer(FakeOpenAIServer):
    """The fake OpenAI server, keeping the raw body of every request."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(root=self.reply, leaf=lambda prompt: f"leaf answer to {prompt}", **kwargs)
        self.bodies: list[bytes] = []

    @staticmethod
    def reply(messages: list[dict[str, Any]]) -> str:
        done = turns_done(messages)
        if str(messages[-1].get("content", "")).startswith("Summarize your progress"):
            return f"Summary: finished turn {done}"
        script = CHILD if "summarise this" in str(messages[1].get("content", "")) else PARENT
        return script[min(done, len(script) - 1)]

    async def route(self, method: str, path: str, body: bytes) -> Response:
        if path.endswith("/chat/completions"):
            with self._lock:
                self.bodies.append(body)
        return await super().route(method, path, body)


def run_once(environment: str, environment_kwargs: dict[str, Any]) -> tuple[list[bytes], Any]:
    with RecordingServer() as server:
        url = server.base_url
        # The same port both times: the base URL is part of nothing sent, but the server must be the same.
        rlm = RLM(
            backend="openai",
            backend_kwargs={"model_name": "root-model", "base_url": url, "api_key": "k", "max_retries": 0},
            other_backends=["openai"],
            other_backend_kwargs=[{"model_name": "leaf-model", "base_url": url, "api_key": "k", "max_retries": 0}],
            environment=environment,
            environment_kwargs=environment_kwargs,
            max_depth=2,
            max_iterations=len(PARENT),
            custom_tools={"LOCAL": {"tool": environment == "local", "description": "a flag"}},
            compaction=True,
            compaction_threshold_pct=1.0,
            context_window=1400,  # a few turns fill it: the later ones compact first
        )
        result = rlm.completion("the parent context\n" * 50, "What is in it?")
        return sorted(server.bodies), result  # calls of one batch arrive in any order


KINDS = [
    pytest.param("local", {}, id="local"),
    pytest.param("subprocess", {}, id="subprocess"),
    pytest.param(
        "docker",
        DOCKER,
        id="docker",
        marks=pytest.mark.skipif(DOCKER_PROBLEM is not None, reason=f"no usable Docker engine: {DOCKER_PROBLEM}"),
    ),
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("environment", "options"), KINDS)
def test_two_runs_of_one_conversation_send_byte_identical_requests(environment: str, options: dict[str, Any]) -> None:
    first, result = run_once(environment, options)
    second, again = run_once(environment, options)
    # The conversation went everywhere it should, so that every part of a prompt was compared.
    assert result.finish_reason == again.finish_reason == "max_iterations"
    sent = b"\n".join(first).decode()
    parts = ["KeyError", "leaf answer to count the word y", "the child's summary", "compacted"]
    for part in parts + ([] if environment == "local" else ["restarted"]):
        assert part in sent, part
    assert len(first) == len(second) >= 12
    assert first == second
