"""Whole runs through the real openai SDK against the local OpenAI-compatible server."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, RLMLogger, read_trajectory
from rlm_adapters.errors import RLMRunFailed
from rlm_adapters.testing import FakeOpenAIServer, scripted_root, turn_of

NEEDLE_SEARCH = """```repl
chunk = 500_000
pieces = [context[i:i + chunk] for i in range(0, len(context), chunk)]
answers = llm_query_batched([f"What is the magic number in this text? Reply NONE if absent.\\n{p}" for p in pieces])
found = [a for a in answers if a != "NONE"]
print(len(pieces), found)
```"""


def haystack(size: int, needle: str | None, seed: int = 7) -> str:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "paper", "green", "quiet"]
    text = " ".join(rng.choice(words) for _ in range(size // 6))[:size]
    if needle:
        middle = int(len(text) * 0.63)
        text = text[:middle] + f" {needle} " + text[middle:]
    return text


def test_needle_in_five_megabytes_through_batched_sub_calls(
    fake_server: FakeOpenAIServer, openai_options: dict[str, Any]
) -> None:
    fake_server.root = scripted_root([NEEDLE_SEARCH, "FINAL_VAR(found)"])
    fake_server.latency = 0.05
    context = haystack(5_000_000, "The special magic number is 7734921.")
    rlm = RLM(**openai_options, max_sub_tokens=3_000_000)
    result = rlm.completion(context, "What is the magic number?")
    assert result.finish_reason == "final"
    assert json.loads(result.response) == ["7734921"]
    assert fake_server.counters.leaf_requests == -(-len(context) // 500_000)
    assert fake_server.counters.peak_in_flight > 1


def test_usage_totals_equal_what_the_server_saw(fake_server: FakeOpenAIServer, openai_options: dict[str, Any]) -> None:
    fake_server.root = scripted_root([NEEDLE_SEARCH, "FINAL(done)"])
    result = RLM(**openai_options).completion(haystack(1_200_000, None), "q")
    usage = result.usage_summary.to_dict()
    counters = fake_server.counters
    assert usage["total"]["calls"] == counters.requests == 5
    assert usage["total"]["input_tokens"] == counters.prompt_tokens
    assert usage["total"]["output_tokens"] == counters.completion_tokens
    assert usage["root"]["calls"] == counters.root_requests == 2
    assert usage["by_model"]["leaf-model"]["calls"] == counters.by_model["leaf-model"] == 3


def test_depth_two_through_the_server(fake_server: FakeOpenAIServer, openai_options: dict[str, Any]) -> None:
    def root(messages: list[dict[str, Any]]) -> str:
        turn = turn_of(messages)
        if "Count the words" in messages[1]["content"]:  # a nested run's first user message carries its query
            return ["```repl\nn = len(context.split())\n```", "FINAL_VAR(n)"][min(turn, 1)]
        return [
            "```repl\nwords = context.split()\nparts = [' '.join(words[:4]), ' '.join(words[4:])]\n"
            "counts = rlm_query_batched(['Count the words'] * 2, parts)\nprint(counts)\n```",
            "FINAL_VAR(counts)",
        ][min(turn, 1)]

    fake_server.root = root
    result = RLM(**openai_options, max_depth=2).completion("one two three four five six seven eight", "how many?")
    assert json.loads(result.response) == ["4", "4"]
    assert fake_server.counters.root_requests == 6  # 2 top-level turns + 2 children x 2 turns
    assert result.metadata["depth_reached"] == 1


@pytest.mark.parametrize("finish", ["max_iterations", "budget", "timeout", "error"])
def test_each_finish_reason_through_the_server(
    finish: str, fake_server: FakeOpenAIServer, openai_options: dict[str, Any]
) -> None:
    fake_server.root = ["```repl\nprint('working')\n```"]
    options: dict[str, Any] = {"max_iterations": 2}
    if finish == "budget":
        options = {"max_root_tokens": 800}
    elif finish == "timeout":
        fake_server.root_latency = 0.5
        options = {"timeout": 1.2}
    elif finish == "error":
        fake_server.fail_next(status=401, count=1, message="invalid api key")
    result = RLM(**openai_options, **options, raise_on_error=False).completion("some context", "q")
    assert result.finish_reason == finish
    if finish == "error":
        assert "HTTP 401" in (result.error or "") and "check the API key" in (result.error or "")


def test_a_model_that_never_answers_ends_with_timeout(
    fake_server: FakeOpenAIServer, openai_options: dict[str, Any]
) -> None:
    fake_server.hang_next(1)
    result = RLM(**openai_options, timeout=1.0).completion("ctx", "q")
    assert result.finish_reason == "timeout"
    assert result.execution_time < 5


def test_a_model_answering_garbage_ends_with_a_clear_error(
    fake_server: FakeOpenAIServer, openai_options: dict[str, Any]
) -> None:
    fake_server.garbage_next(1)
    with pytest.raises(RLMRunFailed, match="root-model") as caught:
        RLM(**openai_options).completion("ctx", "q")
    assert caught.value.result.finish_reason == "error"


def _log_size(server: FakeOpenAIServer, options: dict[str, Any], context: str, folder: Path) -> tuple[int, str]:
    server.root = [NEEDLE_SEARCH, "```repl\nprint(found)\n```", "FINAL(done)"]
    result = RLM(**options, logger=RLMLogger(folder), max_sub_tokens=5_000_000).completion(context, "q")
    assert result.trajectory_file is not None
    return result.trajectory_file.stat().st_size, result.trajectory_file.read_text(encoding="utf-8")


def test_log_does_not_grow_with_context_size(
    fake_server: FakeOpenAIServer, openai_options: dict[str, Any], tmp_path: Path
) -> None:
    small, _ = _log_size(fake_server, openai_options, haystack(1_000_000, "UNIQUEMARKER-1"), tmp_path / "a")
    large, text = _log_size(fake_server, openai_options, haystack(4_000_000, "UNIQUEMARKER-4"), tmp_path / "b")
    # Four times the context: more sub-call records (one per chunk) but each cut to a fixed size.
    assert large < 4 * small and large < 1_000_000
    assert "UNIQUEMARKER-4" not in text  # the context never reaches the log
    header, events = read_trajectory(next((tmp_path / "b").glob("*.jsonl")))
    assert header["context"]["total_chars"] > 3_000_000
    assert events[0]["kind"] == "run_start" and events[-1]["kind"] == "final"
    root_calls = [e for e in events if e["kind"] == "root_call"]
    assert root_calls[0]["messages_sent"][0]["role"] == "system"
    assert all(len(e["messages_sent"]) == 1 for e in root_calls[1:])  # only the new message each turn


def test_sandbox_sees_no_host_secret(
    fake_server: FakeOpenAIServer, openai_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    fake_server.root = ["```repl\nimport os\nFINAL(str(sorted(os.environ)))\n```"]
    result = RLM(**openai_options).completion("ctx", "q")
    assert "OPENAI_API_KEY" not in result.response and "sk-host-secret" not in result.response
