"""``stream=true``: the opening chunk at once, progress as ``reasoning_content``, the answer, usage, ``[DONE]``."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import openai

from rlm_adapters.serve import ServeConfig
from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import Served, served_config

ASK = [{"role": "user", "content": "What is the magic number?"}]
SUB_CALL = ["```repl\nx = llm_query('the magic number is 4242')\nprint(x)\n```", "FINAL(4242)"]


def test_the_sdks_stream_carries_progress_then_the_answer_then_usage(
    served: Served, upstream: FakeOpenAIServer
) -> None:
    upstream.root = SUB_CALL
    sdk = openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)
    chunks = list(
        sdk.chat.completions.create(model="test", messages=ASK, stream=True, stream_options={"include_usage": True})
    )
    assert all(c.object == "chat.completion.chunk" and c.model == "test" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    progress = [c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks if c.choices]
    progress = [p for p in progress if p]
    assert progress and progress[0].startswith("RLM run started")
    assert any(p.startswith("iteration 2/") for p in progress)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "4242"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"]
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.prompt_tokens == upstream.counters.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])
    # Progress comes before any of the answer's text.
    first_text = next(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content)
    first_progress = next(
        i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.model_extra.get("reasoning_content")
    )
    assert first_progress < first_text


async def test_the_async_stream_without_usage(served: Served) -> None:
    async with openai.AsyncOpenAI(base_url=served.base_url, api_key="k", max_retries=0) as sdk:
        stream = await sdk.chat.completions.create(model="test", messages=ASK, stream=True)
        chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "42"
    assert all(c.usage is None for c in chunks)


def test_the_raw_stream_ends_with_done_and_progress_can_be_comments_only(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    served = serve(served_config(upstream, progress=False, heartbeat=0.001))
    upstream.root_latency = 0.2  # long enough for heartbeats at 1 ms; the count is not asserted
    with httpx.stream(
        "POST",
        f"{served.base_url}/chat/completions",
        json={"model": "test", "messages": ASK, "stream": True},
        timeout=30,
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    comments = [line for line in lines if line.startswith(":")]
    assert comments, "SSE comments keep idle connections alive"
    assert not any("reasoning_content" in line for line in lines)


def test_progress_keeps_coming_after_a_heartbeat(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """A heartbeat cancels the wait for the run's next event: the event stream must go on after it (it used to end
    there, every later turn's progress lost and the stream silent until the answer)."""
    served = serve(served_config(upstream, heartbeat=0.05))
    upstream.root = SUB_CALL
    upstream.root_latency = 0.3  # each root call spans several heartbeats
    sdk = openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)
    chunks = list(sdk.chat.completions.create(model="test", messages=ASK, stream=True))
    progress = [c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks if c.choices]
    assert any(p and p.startswith("iteration 1/") for p in progress)
    assert any(p and p.startswith("iteration 2/") for p in progress)  # after heartbeats during both root calls
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "4242"


def test_a_failed_run_ends_the_stream_with_an_error_the_sdk_raises(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.fail_next(status=401, message="bad upstream key", count=10)
    sdk = openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)
    stream = sdk.chat.completions.create(model="test", messages=ASK, stream=True)
    try:
        for _ in stream:
            pass
    except openai.APIError as exc:
        assert "the RLM run failed" in exc.message
    else:
        raise AssertionError("the error event was not raised")


def test_the_first_progress_line_is_one_short_line_in_the_default_sandbox(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    """Issue 51: it held the sandbox's whole isolation text (some 900 characters of limits), which a chat UI
    shows as the model's "thinking"; now the level only, as ``verbose`` prints it."""
    served = serve(served_config(upstream, environment="subprocess"))
    sdk = openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)
    chunks = list(sdk.chat.completions.create(model="test", messages=ASK, stream=True))
    progress = [c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks if c.choices]
    first = next(p for p in progress if p)
    assert first.startswith("RLM run started: root model root-model, sandbox subprocess (")
    assert first.count("\n") == 1 and first.endswith(")\n") and len(first) <= 160, first
    assert "memory" not in first and ";" not in first
