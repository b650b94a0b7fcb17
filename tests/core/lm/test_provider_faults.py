"""Hostile and broken providers, through a whole run with the real SDKs over a socket (issue 24, defect 10).

One backend per wire format (OpenAI, Anthropic, Bedrock, Gemini, and LiteLLM over OpenAI's): a ``Retry-After``
past the run's deadline, a reply trickled a byte at a time, an oversized reply (plain, chunked, gzipped), content
parts and content that is not text, and a little fuzzing of the reply's shape. None of them may hold a run past
its deadline or raise anything out of `completion()` with ``raise_on_error=False`` (whose failed result these
tests read; by default the same run raises `RLMRunFailed` carrying it).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters.testing import (
    FakeAnthropicServer,
    FakeBedrockServer,
    FakeGeminiServer,
    FakeModelServer,
)

from .providers import FAULT_PROVIDERS, Provider, installed_provider

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

CODE = "```repl\nanswer = llm_query(context)\nprint(answer)\n```"
ROOT = [CODE, "FINAL_VAR(answer)"]
CONTEXT = "The magic number is 4242."
QUERY = "What is the magic number?"
MIB = 2**20


@pytest.fixture(params=FAULT_PROVIDERS, ids=[p.name for p in FAULT_PROVIDERS])
def provider(request: pytest.FixtureRequest) -> Provider:
    return installed_provider(request)


@pytest.fixture
def server(provider: Provider) -> Iterator[FakeModelServer]:
    with provider.server(root=ROOT) as running:
        yield running


def build(provider: Provider, server: FakeModelServer, *, run_timeout: float = 60, **overrides: Any) -> RLM:
    """Root and sub model on the provider; `overrides` go to both clients' backend_kwargs."""
    settings = {**provider.settings(server), **overrides}
    return RLM(
        backend=provider.name,
        backend_kwargs={"model_name": provider.root, **settings},
        other_backends=[provider.name],
        other_backend_kwargs=[{"model_name": provider.sub, **settings}],
        environment="local",
        max_iterations=4,
        timeout=run_timeout,
        raise_on_error=False,
    )


def timed(rlm: RLM) -> tuple[Any, float]:
    started = time.monotonic()
    result = rlm.completion(CONTEXT, QUERY)
    return result, time.monotonic() - started


def warm(provider: Provider, server: FakeModelServer) -> None:
    """One ordinary run first: SDK imports and lazy set-up are not what a short bound below measures."""
    assert build(provider, server).completion(CONTEXT, QUERY).response == "4242"
    server.reset_counters()


# -- Retry-After past the run's deadline ---------------------------------------------------------------------
@pytest.mark.parametrize("client_retries", [None, 3], ids=["engine-retries", "client-retries"])
def test_a_retry_after_past_the_deadline_ends_the_run_at_once_as_a_timeout(
    provider: Provider, server: FakeModelServer, client_retries: int | None
) -> None:
    warm(provider, server)
    server.fail_next(429, count=40, retry_after="99999999", message="slow down")
    retries = {} if client_retries is None else {"max_retries": client_retries}
    result, elapsed = timed(build(provider, server, run_timeout=4, **retries))

    assert result.finish_reason == "timeout", result.error
    assert elapsed < 4.0  # before the deadline, not 60 s of backoff after it
    assert "Retry-After" in str(result.error) and "deadline" in str(result.error)
    assert "99,999,999" in str(result.error)
    assert server.counters.requests == 1  # nothing was retried: the wait could not fit


def test_a_sub_call_refused_past_the_deadline_comes_back_to_model_code(
    provider: Provider, server: FakeModelServer
) -> None:
    def root(messages: list[dict[str, Any]]) -> str:
        if sum(m.get("role") == "assistant" for m in messages) == 0:
            server.fail_next(429, retry_after="99999999")  # the next request: the sub-call
            return CODE
        return "FINAL_VAR(answer)"

    server.root = root
    result, elapsed = timed(build(provider, server, run_timeout=20))

    assert result.finish_reason == "final", result.error
    assert result.response.startswith("Error:") and "deadline" in result.response
    assert elapsed < 10.0


# -- a trickled reply ----------------------------------------------------------------------------------------
# The whole trickled reply takes about a minute; a cut comes at its limit plus this much, room for the run's end
# and a busy machine (bedrock's at a load of 6 came 2.6 s after a 2 s deadline).
CUT_SLACK = 5.0


def test_a_trickled_reply_is_cut_at_the_request_timeout(provider: Provider, server: FakeModelServer) -> None:
    warm(provider, server)
    server.trickle_next(interval=0.1)  # no read waits long; the whole reply would take about a minute
    result, elapsed = timed(build(provider, server, timeout=1.0, max_retries=0))

    assert result.finish_reason == "error"
    assert "timeout" in str(result.error).lower()
    assert elapsed < 1.0 + CUT_SLACK
    assert server.wait_cut_off(1, timeout=30)  # the client hung up (a thread reading on would not)


def test_a_trickled_reply_is_cut_at_the_runs_deadline(provider: Provider, server: FakeModelServer) -> None:
    warm(provider, server)
    server.trickle_next(interval=0.1)
    result, elapsed = timed(build(provider, server, run_timeout=2.0))

    assert result.finish_reason == "timeout", result.error
    assert elapsed < 2.0 + CUT_SLACK
    # A hang-up is seen at the server's next write; a client reading on would take the whole reply (no cut at all).
    assert server.wait_cut_off(1, timeout=30)


# -- an oversized reply --------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_oversized_reply_is_refused_while_it_is_read(
    provider: Provider, server: FakeModelServer, chunked: bool
) -> None:
    server.huge_next(48 * MIB, chunked=chunked)
    result, _ = timed(build(provider, server, max_reply_bytes=1 * MIB))

    assert result.finish_reason == "error"
    assert "max_reply_bytes" in str(result.error)
    assert f"{provider.label} call to model {provider.root!r}" in str(result.error)
    if provider.reads_capped:
        assert server.wait_cut_off(1)  # reading stopped: the server could not send the rest
        assert server.counters.bytes_sent < 24 * MIB


def test_a_gzip_bomb_is_refused_by_its_decoded_size(provider: Provider, server: FakeModelServer) -> None:
    if provider.server is FakeBedrockServer or not provider.reads_capped:
        pytest.skip(f"{provider.name} reads through no httpx client of ours (no gzip asked for)")
    server.huge_next(512 * MIB, gzip=True)  # about 0.5 MiB on the wire
    result, elapsed = timed(build(provider, server, max_reply_bytes=4 * MIB))

    assert result.finish_reason == "error"
    assert "max_reply_bytes" in str(result.error)
    assert elapsed < 10.0


# -- content parts and content that is not text --------------------------------------------------------------
def other_part(server: FakeModelServer) -> dict[str, Any]:
    """A part that is not text (a tool call, an image), as this wire format writes it."""
    if isinstance(server, FakeAnthropicServer):
        return {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}
    if isinstance(server, FakeBedrockServer):
        return {"toolUse": {"toolUseId": "t1", "name": "lookup", "input": {}}}
    if isinstance(server, FakeGeminiServer):
        return {"functionCall": {"name": "lookup", "args": {}}}
    return {"type": "image_url", "image_url": {"url": "https://x"}}


def text_parts(server: FakeModelServer, first: str, second: str) -> list[dict[str, Any]]:
    """Two text parts and one the model thought, as this wire format writes them."""
    if isinstance(server, FakeAnthropicServer):
        return [
            {"type": "thinking", "thinking": "let me see", "signature": "sig"},
            {"type": "text", "text": first},
            {"type": "text", "text": second},
        ]
    if isinstance(server, FakeBedrockServer):
        return [{"reasoningContent": {"reasoningText": {"text": "let me see"}}}, {"text": first}, {"text": second}]
    if isinstance(server, FakeGeminiServer):
        return [{"text": "let me see", "thought": True}, {"text": first}, {"text": second}]
    return [{"type": "text", "text": first}, {"type": "text", "text": second}]


def test_content_parts_are_read_as_text(provider: Provider, server: FakeModelServer) -> None:
    half = len(CODE) // 2
    server.content_next(text_parts(server, CODE[:half], CODE[half:]))
    result = build(provider, server).completion(CONTEXT, QUERY)

    assert (result.finish_reason, result.response) == ("final", "4242"), result.error


@pytest.mark.parametrize(
    "content", [5, {"text": "a dict"}, "other-part", [7]], ids=["int", "dict", "other-part", "int-part"]
)
def test_content_that_is_not_text_ends_the_run_with_error(
    provider: Provider, server: FakeModelServer, content: Any
) -> None:
    server.content_next([other_part(server)] if content == "other-part" else content)
    # One try: LiteLLM calls such a body an HTTP 500, which the engine would otherwise retry (and get an answer).
    result = build(provider, server, max_retries=0).completion(CONTEXT, QUERY)

    assert result.finish_reason == "error"
    assert f"{provider.label} call to model {provider.root!r}" in str(result.error)
    assert result.usage_summary.total.calls == 0


# -- fuzzing the reply's shape -------------------------------------------------------------------------------
def _tokens_set_to(bad: Any) -> Callable[[Any], Any]:
    def reshape(payload: Any) -> Any:
        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for key, value in node.items():
                    if "token" in key.lower() and isinstance(value, int):
                        node[key] = bad
                    else:
                        walk(value)
            elif isinstance(node, list):
                for item in node:
                    walk(item)

        walk(payload)
        return payload

    return reshape


def _nulled(payload: Any) -> Any:
    """Every value that holds the reply's text set to null."""
    if isinstance(payload, dict):
        return {k: None if k in ("content", "text", "parts", "message") else _nulled(v) for k, v in payload.items()}
    if isinstance(payload, list):
        return [_nulled(v) for v in payload]
    return payload


def _first_list_emptied(payload: Any) -> Any:
    for key in ("choices", "content", "candidates"):
        if isinstance(payload, dict) and key in payload:
            payload[key] = []
    if isinstance(payload, dict) and "output" in payload:
        payload["output"] = {}
    return payload


RESHAPES: dict[str, Callable[[Any], Any]] = {
    "null": lambda p: None,
    "list": lambda p: [p],
    "string": lambda p: "a plain string",
    "empty-object": lambda p: {},
    "not-utf8": lambda p: b"\xff\xfe{not json",
    "deeply-nested": lambda p: b"[" * 100_000 + b"]" * 100_000,
    "text-nulled": _nulled,
    "no-choices": _first_list_emptied,
    "tokens-negative": _tokens_set_to(-5),
    "tokens-huge": _tokens_set_to(10**400),
    "tokens-string": _tokens_set_to("12"),
    "tokens-float": _tokens_set_to(1.5),
    "tokens-null": _tokens_set_to(None),
}


@pytest.mark.parametrize("shape", list(RESHAPES), ids=list(RESHAPES))
def test_no_reply_shape_escapes_completion(provider: Provider, server: FakeModelServer, shape: str) -> None:
    server.reshape_next(RESHAPES[shape])
    result = build(provider, server).completion(CONTEXT, QUERY)  # returns, whatever came back

    assert result.finish_reason in ("final", "error"), result.error
    if result.finish_reason == "error":
        assert provider.label in str(result.error)
    usage = result.usage_summary.total
    assert 0 <= usage.input_tokens < 10**12 and 0 <= usage.output_tokens < 10**12
