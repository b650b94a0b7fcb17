"""Issue 54: what the first real model wrote, played back over the wire (the fake OpenAI server).

A model that never stops, never writes code, writes only fences, answers with nothing, doubles its opening
fences, tags a block with a language that does not run, or leaves a block open: each run ends with a clear
finish reason, counts what it spent, and tells the model what happened instead of passing in silence.
"""

from __future__ import annotations

from typing import Any

from rlm_adapters import RLM, RLMResult
from rlm_adapters.core.engine.fences import scan
from rlm_adapters.core.engine.parsing import RUNNABLE_TAGS, find_code_blocks
from rlm_adapters.testing import FakeOpenAIServer

RAMBLE = "Let me think about this. " * 400  # about 2,500 tokens of prose


def _run(replies: list[str], **options: Any) -> tuple[RLMResult, FakeOpenAIServer, list[list[dict[str, Any]]]]:
    with FakeOpenAIServer(replies) as server:
        server.keep_requests = True
        kwargs = {"model_name": "gpt-5", "base_url": server.base_url, "api_key": "k"}
        options = {"max_iterations": 6, **options}
        rlm = RLM(backend="openai", backend_kwargs=kwargs, environment="local", **options)
        result = rlm.completion("the context", "q")
        sent = [entry["messages"] for entry in server.requests_log]
    return result, server, sent


def _told(sent: list[list[dict[str, Any]]], turn: int) -> str:
    """What the model was told after its reply of `turn` (1-based): the last message of the next request."""
    return str(sent[turn][-1]["content"])


def test_a_model_that_never_stops_is_cut_at_its_cap_flagged_and_told() -> None:
    result, server, sent = _run([RAMBLE], max_reply_tokens=200)
    total = result.usage_summary.total
    assert result.finish_reason in ("max_iterations", "error")
    assert total.truncated_replies == total.calls >= 2  # every reply hit the cap, and the usage says so
    assert "cut at its token cap (max_reply_tokens=200)" in _told(sent, 1)
    assert all(entry.get("max_tokens") == 200 for entry in (e["options"] for e in server.requests_log))
    assert (total.input_tokens, total.output_tokens) == (
        server.counters.prompt_tokens,
        server.counters.completion_tokens,
    )


def test_a_reply_cut_inside_its_code_block_does_not_run_it_and_says_so() -> None:
    cut = "```repl\nx = 1\nprint('start')\n" + "y = 2\n" * 400  # never closed: the cap cuts it
    result, _, sent = _run([cut, "FINAL(ok)"], max_reply_tokens=100)
    assert result.response == "ok"
    told = _told(sent, 1)
    assert "cut before its last ```repl block was closed: that block did not run" in told
    assert "[block 1 output]" not in told


def test_a_model_that_repeats_itself_is_told_once_then_the_run_ends_with_a_reason() -> None:
    result, _, sent = _run(["I will look at the context now."], max_iterations=30)
    assert result.finish_reason == "error" and result.metadata.get("limit") == "repeated_turn"
    assert "repeated the same turn 5 times in a row" in (result.error or "")
    assert "You have written the same thing 3 turns in a row" in _told(sent, 3)
    assert len(sent) == 5  # not 30 turns of the same nudge


def test_the_same_failing_cell_again_and_again_ends_the_run() -> None:
    result, _, _ = _run(["FINAL_VAR('ans')"], max_iterations=30)
    assert result.finish_reason == "error" and result.metadata.get("limit") == "repeated_turn"
    assert result.iterations == 5


def test_only_fences_and_an_empty_body_end_clearly_and_count_what_was_spent() -> None:
    for reply in ["```\n```\n```repl\n```", ""]:
        result, server, _ = _run([reply])
        assert result.finish_reason in ("max_iterations", "error")
        total = result.usage_summary.total
        assert total.calls == server.counters.requests
        assert (total.input_tokens, total.output_tokens) == (
            server.counters.prompt_tokens,
            server.counters.completion_tokens,
        )


def test_an_empty_block_is_named_to_the_model() -> None:
    result, _, sent = _run(["```repl\n```\nThe answer follows.", "FINAL(ok)"])
    assert result.response == "ok"
    assert "A ```repl block was empty: nothing ran." in _told(sent, 1)


def test_a_doubled_opening_fence_runs_its_code() -> None:
    doubled = "```python\n```python\nprint(len(context))\n```\n\nOutput: 11"
    result, _, sent = _run([doubled, "FINAL(ok)"])
    assert result.response == "ok"
    told = _told(sent, 1)
    assert "[block 1 output]\n11" in told and "SyntaxError" not in told


def test_a_block_in_another_language_is_named_not_run() -> None:
    result, _, sent = _run(["```bash\nls -la\n```", "FINAL(ok)"])
    assert result.response == "ok"
    assert "A ```bash block did not run: only ```py, ```python, ```python3, ```repl run." in _told(sent, 1)


def test_an_unclosed_block_at_the_end_of_a_whole_reply_runs_and_is_named() -> None:
    result, _, sent = _run(["```repl\nprint(len(context))\n", "FINAL(ok)"])
    assert result.response == "ok"
    told = _told(sent, 1)
    assert "never closed; it ran as written" in told and "[block 1 output]\n11" in told


def test_fence_reading_follows_commonmark() -> None:
    # A tagged fence line never closes a block; a bare one of the same kind and length does.
    assert find_code_blocks("```repl\na = 1\n```python\nb = 2\n```") == ["a = 1\n```python\nb = 2\n"]
    assert find_code_blocks("```\n```python\nx = 1\n```") == ["x = 1\n"]
    assert find_code_blocks("````repl\nprint('```')\n```\n````") == ["print('```')\n```\n"]
    assert find_code_blocks("~~~python\nx = 1\n~~~") == []
    assert scan("~~~python\nx = 1\n~~~", RUNNABLE_TAGS).notes == ["A ~~~python block did not run: only ``` fences run."]
    assert find_code_blocks("```{python}\nx = 1\n```") == ["x = 1\n"]
    # Lines end at "\n" only: a U+2028 inside the code stays in the code.
    assert find_code_blocks("```repl\ns = 'a\u2028b'\n```") == ["s = 'a\u2028b'\n"]
