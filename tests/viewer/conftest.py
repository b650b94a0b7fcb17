"""Real trajectory logs for the viewer tests, recorded from scripted runs in the local sandbox."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rlm_adapters import RLM, Message, RLMLogger, ScriptedModel
from rlm_adapters.testing import turn_of as _turn

CONTEXT_MARKER = "ZEBRA-CONTEXT-MARKER-0001-do-not-leak"
SUB_RESULT = "PART-3-RESULT-FROM-SUBMODEL"
NESTED_PROMPT = "nested sub-call UNIQUE-SUBCALL-STRING"

ROOT_TURNS = [
    # Printing the context's start puts context text into the next turn's messages (the leak test).
    "Let me look first.\n```repl\nprint(context[:60])\nprint('\\n'.join(f'line {i}' for i in range(20)))\n```",
    "```repl\nanswers = llm_query_batched([f'Find the needle in part {i}' for i in range(4)])\n```\n"
    "```repl\nr = rlm_query('NESTED: count the words', context='nested context words ' * 5)\nprint(r)\n```",
    "FINAL(42)",
]
NESTED_TURNS = [f"```repl\nx = llm_query('{NESTED_PROMPT}')\nprint(x)\n```", "FINAL(nested ok)"]


def root_model(messages: list[Message]) -> str:
    """The top-level root: look, fan out, recurse, answer; also the nested RLM's root (which runs on the
    root model, as in the reference RLM)."""
    if "NESTED:" in messages[1]["content"]:
        return NESTED_TURNS[min(_turn(messages), len(NESTED_TURNS) - 1)]
    return ROOT_TURNS[min(_turn(messages), len(ROOT_TURNS) - 1)]


def sub_model(messages: list[Message]) -> str:
    """Plays the nested RLM's root (it is sent a system prompt) and answers plain sub-calls."""
    if messages[0]["role"] == "system":
        return NESTED_TURNS[min(_turn(messages), len(NESTED_TURNS) - 1)]
    prompt = messages[-1]["content"]
    return SUB_RESULT if prompt.endswith("part 3") else f"nothing in: {prompt}"


RecordRun = Callable[..., Path]


@pytest.fixture
def record_run(tmp_path: Path) -> RecordRun:
    """Run a scripted RLM (nested runs included) and return its log file.

    Keyword arguments: `root` (the root model's function), `query`, `max_iterations`, `log_dir`.
    """

    def run(
        root: Callable[[list[Message]], str] = root_model,
        query: str = "What is the answer?",
        max_iterations: int = 6,
        log_dir: Path | None = None,
    ) -> Path:
        rlm = RLM(
            backend=ScriptedModel(root, model_name="root-m"),
            other_backends=[ScriptedModel(sub_model, model_name="sub-m")],
            environment="local",
            max_depth=2,
            max_iterations=max_iterations,
            logger=RLMLogger(log_dir or tmp_path / "logs"),
        )
        context = f"{CONTEXT_MARKER} " + "filler text about nothing in particular. " * 40
        result = rlm.completion(context, root_prompt=query)
        assert result.trajectory_file is not None
        return Path(result.trajectory_file)

    return run


@pytest.fixture
def recorded_log(record_run: RecordRun) -> Path:
    """The log of the standard scripted run: 3 root turns, 3 cells, one batch of 4, one nested run."""
    return record_run()
