"""The benchmarks' model server: the shared `FakeOpenAIServer`, taught the reference's root calls.

The fake server tells a root request from a leaf request by our system prompt's wording. The reference
(`rlms`) has its own system prompt, so `BenchServer` marks a request whose system message is the
reference's as a root request too (by composition: the request is rewritten before the shared server's
handler sees it; nothing the reference sends is changed). Every root reply comes from a `Script`, which
plays the same turns for both engines, each in its own dialect for the final answer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from rlm_adapters.testing.fake_openai import ROOT_MARKER, FakeOpenAIServer, turn_of

Side = Literal["ours", "reference"]
REFERENCE_MARKER = "You are a Recursive Language Model (RLM)"
PARENT_MARKER = "BENCH-PARENT-TASK"

# A turn is a function of the engine's dialect: it returns the body of one ```repl block.
Turn = Callable[[Side], str]


def final(side: Side, expression: str) -> str:
    """Code that ends a run with `expression` as its answer, in each engine's dialect."""
    if side == "ours":
        return f"FINAL({expression})"
    return f'answer["content"] = {expression}\nanswer["ready"] = True'


def side_of(messages: list[dict[str, Any]]) -> Side:
    """Which engine sent a root conversation (by its system prompt)."""
    system = str(messages[0].get("content", "")) if messages else ""
    return "reference" if REFERENCE_MARKER in system else "ours"


def is_parent(messages: list[dict[str, Any]]) -> bool:
    """True for the top-level run (its question carries `PARENT_MARKER`), False for a nested child."""
    return any(m.get("role") == "user" and PARENT_MARKER in str(m.get("content", "")) for m in messages)


@dataclass(frozen=True)
class Script:
    """Root turns for the top-level run and for nested children, by turn index (the last one repeats)."""

    parent: tuple[Turn, ...]
    child: tuple[Turn, ...] = ()

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        turns = self.parent if (is_parent(messages) or not self.child) else self.child
        turn = turns[min(turn_of(messages), len(turns) - 1)]
        return f"```repl\n{turn(side_of(messages))}\n```"


class BenchServer(FakeOpenAIServer):
    """`FakeOpenAIServer` that also counts the reference's root requests as root requests."""

    def __init__(self, script: Script | None = None, **kwargs: Any) -> None:
        super().__init__(root=script or Script((lambda side: final(side, "'ok'"),)), **kwargs)
        self.keep_requests = False

    def __enter__(self) -> BenchServer:
        self.start()
        return self

    def use(self, script: Script, latency: float, max_in_flight: int | None = None) -> None:
        """Play `script` at `latency` seconds a request, with fresh counters (429 past `max_in_flight`)."""
        self.root = script
        self.latency = latency
        self.max_in_flight = max_in_flight
        self.reset_counters()

    async def _complete(self, request: dict[str, Any]) -> tuple[int, Any, bytes | None]:
        messages = request.get("messages") or []
        if messages and messages[0].get("role") == "system":
            content = str(messages[0].get("content", ""))
            if REFERENCE_MARKER in content and ROOT_MARKER not in content:
                request = dict(request)
                request["messages"] = [copy.copy(m) for m in messages]
                request["messages"][0]["content"] = f"{content}\n({ROOT_MARKER})"
        return await super()._complete(request)

    def counts(self) -> dict[str, int]:
        """The counters the benchmarks check and report."""
        c = self.counters
        return {
            "requests": c.requests,
            "root_requests": c.root_requests,
            "leaf_requests": c.leaf_requests,
            "peak_in_flight": c.peak_in_flight,
        }
