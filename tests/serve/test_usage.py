"""``usage`` counts every model call of a run, at every depth (root, sub-calls, a nested RLM's own root and sub
calls), each once: the same numbers as the upstream billed, in a ``chat.completion`` and in the stream's last
chunk (``stream_options.include_usage``), through the openai SDK and LiteLLM."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import openai

from rlm_adapters.serve import Ceilings, ServeConfig, parse_model
from rlm_adapters.testing import FakeOpenAIServer, turn_of
from tests.serve.conftest import Served

ASK = [{"role": "user", "content": "What is the magic number?"}]
OUTER = [
    "```repl\nx = rlm_query('INNER: find the magic number', context='notes: the magic number is 4242')\n"
    "y = llm_query('check: the magic number is 4242')\nprint(x, y)\n```",
    "FINAL(4242)",
]
INNER = ["```repl\nz = llm_query(context)\nprint(z)\n```", "```repl\nFINAL_VAR('z')\n```"]


def nested_root(messages: list[dict[str, Any]]) -> str:
    """The outer run calls a nested RLM and a sub-model; the nested run (its question says INNER) calls one."""
    nested = any("INNER: find" in str(m.get("content")) for m in messages[:2])
    script = INNER if nested else OUTER
    return script[min(turn_of(messages), len(script) - 1)]


def expected(upstream: FakeOpenAIServer) -> tuple[int, int, int, int]:
    c = upstream.counters
    return c.requests, c.prompt_tokens, c.completion_tokens, c.prompt_tokens + c.completion_tokens


def client(upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]) -> openai.OpenAI:
    """The SDK at a server whose model ``deep`` may nest one RLM (``max_depth=2``) over the root's script."""
    ceilings = Ceilings(max_depth=2)
    deep = parse_model(
        f"deep=root-model,sub=leaf-model,base_url={upstream.base_url},max_depth=2,direct_below_tokens=off", ceilings
    )
    served = serve(ServeConfig([replace(deep, api_key="upstream-key")], ceilings, environment="local"))
    upstream.root = nested_root
    return openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)


def test_a_completions_usage_is_every_call_of_every_depth(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    reply = client(upstream, serve).chat.completions.create(model="deep", messages=ASK)
    assert reply.choices[0].message.content == "4242"
    # 2 outer root turns, 2 nested root turns, the nested sub-call and the outer one.
    assert (upstream.counters.root_requests, upstream.counters.leaf_requests) == (4, 2)
    assert reply.usage is not None and reply.model_extra is not None
    calls, prompt, completion, total = expected(upstream)
    assert (reply.model_extra["rlm"]["calls"], reply.usage.prompt_tokens) == (calls, prompt)
    assert (reply.usage.completion_tokens, reply.usage.total_tokens) == (completion, total)


def test_the_streams_usage_chunk_is_every_call_of_every_depth(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    sdk = client(upstream, serve)
    chunks = list(
        sdk.chat.completions.create(model="deep", messages=ASK, stream=True, stream_options={"include_usage": True})
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "4242"
    assert (upstream.counters.root_requests, upstream.counters.leaf_requests) == (4, 2)
    usage = chunks[-1].usage
    assert usage is not None and chunks[-1].choices == []
    _calls, prompt, completion, total = expected(upstream)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (prompt, completion, total)
    assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)
