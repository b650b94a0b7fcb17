"""A run killed with SIGKILL part-way, for the resume tests of the engine, `rlm ask` and `rlm eval`.

`LedgerServer` is the fake OpenAI server keeping a ledger of each request (as canonical JSON) and whether its
reply had gone out before the kill. `kill_when` waits, without polling, for a request the test names to
arrive, then kills the process: the requests answered before it are the ones a resumed run must not repeat.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import Answer, Response

# A root model's turns: two batches of six sub-calls, then the answer from both. The prompts carry a digest
# of the context, so that the sub-calls of two runs over different contexts are different requests.
TAG = "import hashlib\ntag = hashlib.sha256(str(context).encode()).hexdigest()[:12]\n"
BATCHES = [
    f"```repl\n{TAG}a = llm_query_batched([f'{{tag}}: the magic number is {{1000 + i}}' for i in range(6)])\n"
    "print(a)\n```",
    "```repl\nb = llm_query_batched([f'{tag}: the magic number is {2000 + i}' for i in range(6)])\nprint(b)\n```",
    "```repl\nFINAL(str(sum(int(x) for x in a + b)))\n```",
]
BATCHES_ANSWER = str(sum(range(1000, 1006)) + sum(range(2000, 2006)))


def second_batch(request: dict[str, Any]) -> bool:
    """The first request of `BATCHES`' second batch: everything before it has come back."""
    return "the magic number is 20" in json.dumps(request["messages"])


class LedgerServer(FakeOpenAIServer):
    """The fake OpenAI server, with a ledger of requests: what arrived, and what was answered."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrived: list[str] = []
        self.answered: list[str] = []
        self._changed = threading.Condition()
        self._watch: Callable[[dict[str, Any]], bool] | None = None
        self._seen = threading.Event()

    @staticmethod
    def key(model: str, messages: list[dict[str, Any]], options: dict[str, Any] | None) -> str:
        return json.dumps({"model": model, "messages": messages, "options": options or {}}, sort_keys=True)

    async def answer(
        self, model: str, messages: list[dict[str, Any]], options: dict[str, Any] | None = None
    ) -> Answer | Response:
        key = self.key(model, messages, options)
        with self._changed:
            self.arrived.append(key)
            if self._watch is not None and self._watch({"model": model, "messages": messages}):
                self._seen.set()
        result = await super().answer(model, messages, options)
        with self._changed:
            if isinstance(result, Answer):
                self.answered.append(key)
        return result

    def watch(self, predicate: Callable[[dict[str, Any]], bool]) -> threading.Event:
        """An event set when a request for which `predicate` holds arrives."""
        self._watch, self._seen = predicate, threading.Event()
        return self._seen

    def forget(self) -> None:
        """Start a new ledger (the next run's)."""
        with self._changed:
            self.arrived, self.answered = [], []


def kill_when(server: LedgerServer, process: subprocess.Popen[Any], predicate: Callable[[dict[str, Any]], bool],
              timeout: float = 120.0) -> list[str]:  # fmt: skip
    """SIGKILL `process` (and its process group) once a request matching `predicate` arrives.

    Returns:
        The requests answered before the kill.
    """
    seen = server.watch(predicate)
    if not seen.wait(timeout):
        process.kill()
        raise AssertionError(f"the awaited request never came; the server saw {len(server.arrived)} requests")
    with server._changed:
        with contextlib.suppress(ProcessLookupError):  # it ended on its own first: the test will say so
            os.killpg(process.pid, signal.SIGKILL)
        answered = list(server.answered)
    process.wait(30)
    return answered
