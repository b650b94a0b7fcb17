"""The wire format with the real `openai` SDK (sync and async): answers, usage over every call, models, errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from rlm_adapters.core.cache import open_cache
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.serve import ServeConfig
from rlm_adapters.testing import FakeOpenAIServer
from tests.held_sources import held_claims
from tests.serve.conftest import Served, served_config

ASK = [{"role": "user", "content": "What is the magic number?"}]
SUB_CALL = ["```repl\nx = llm_query('the magic number is 4242')\nprint(x)\n```", "FINAL(4242)"]


def client(served: Served, **options: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="any-key", max_retries=0, **options)  # type: ignore[arg-type]


def test_an_answer_and_its_usage_count_every_model_call(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = SUB_CALL
    reply = client(served).chat.completions.create(model="test", messages=ASK)
    assert reply.object == "chat.completion" and reply.model == "test"
    assert reply.choices[0].message.content == "4242"
    assert reply.choices[0].finish_reason == "stop"
    counters = upstream.counters
    assert (counters.root_requests, counters.leaf_requests) == (2, 1)
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == counters.prompt_tokens
    assert reply.usage.completion_tokens == counters.completion_tokens
    assert reply.usage.total_tokens == counters.prompt_tokens + counters.completion_tokens
    assert reply.model_extra is not None and reply.model_extra["rlm"]["calls"] == 3


async def test_the_async_client(served: Served, upstream: FakeOpenAIServer) -> None:
    async with openai.AsyncOpenAI(base_url=served.base_url, api_key="k", max_retries=0) as aclient:
        reply = await aclient.chat.completions.create(model="test", messages=ASK)
    assert reply.choices[0].message.content == "42"


def test_models_are_listed_and_the_clients_model_picks_one(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    served = serve(served_config(upstream, "other=big-root,sub=small-leaf,base_url={url},max_cost=0.5"))
    sdk = client(served)
    assert [m.id for m in sdk.models.list()] == ["test", "other"]
    assert sdk.models.retrieve("other").model_extra["rlm"] == {  # type: ignore[index]
        "root_model": "big-root",
        "sub_model": "small-leaf",
        "backend": "openai",
    }
    upstream.root = SUB_CALL
    sdk.chat.completions.create(model="other", messages=ASK)
    assert upstream.counters.by_model == {"big-root": 2, "small-leaf": 1}


def test_an_unknown_model_is_openais_404(served: Served) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client(served).chat.completions.create(model="gpt-9", messages=ASK)
    assert caught.value.code == "model_not_found" and caught.value.param == "model"
    assert "GET /v1/models" in caught.value.message


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"frobnicate": 1}, "frobnicate", "Unrecognized request argument supplied: frobnicate"),
        ({"n": 2}, "n", "one choice"),
        ({"logprobs": True}, "logprobs", "no logprobs"),
        ({"store": True}, "store", "stores no completions"),
        ({"functions": [{"name": "f"}]}, "functions", "use tools"),
        ({"modalities": ["text", "audio"]}, "modalities", "text only"),
        ({"temperature": 3}, "temperature", "between 0 and 2"),
        ({"max_completion_tokens": 0}, "max_completion_tokens", "at least 1"),
        ({"stream_options": {"include_usage": True}}, "stream_options", "only allowed when 'stream'"),
        ({"response_format": {"type": "yaml"}}, "response_format", "json_schema"),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort", "must be one of none, minimal, low"),
    ],
)
def test_each_field_is_used_or_refused_never_ignored(served: Served, extra: dict, param: str, words: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(served).chat.completions.create(model="test", messages=ASK, extra_body=extra)
    assert caught.value.status_code == 400
    assert caught.value.param == param
    assert words in caught.value.message
    body = caught.value.body
    assert isinstance(body, dict) and set(body) == {"message", "type", "param", "code"}
    assert body["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([], "messages"),
        ([{"role": "system", "content": "be brief"}], "messages"),
        ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}],
         "messages[0].content[0]"),
        ([{"role": "wizard", "content": "hi"}], "messages[0].role"),
        ([{"role": "user", "content": "hi", "colour": "red"}], "messages[0].colour"),
        ([{"role": "user", "content": "hi"}, {"role": "tool", "content": "x"}], "messages[1].tool_call_id"),
    ],
)  # fmt: skip
def test_bad_messages_are_named(served: Served, messages: list, param: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(served).chat.completions.create(model="test", messages=messages)
    assert caught.value.param == param


def test_a_body_that_is_not_json_and_an_unknown_path(served: Served) -> None:
    url = served.base_url
    bad = httpx.post(f"{url}/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "could not parse the JSON body" in bad.json()["error"]["message"]
    assert httpx.get(f"{url}/chat/completions").status_code == 405
    missing = httpx.get(f"{url}/embeddings")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url"


def test_stop_sequences_and_max_tokens_cut_the_answer(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = ["FINAL(" + "alpha beta gamma " * 40 + "END tail)"]
    sdk = client(served)
    stopped = sdk.chat.completions.create(model="test", messages=ASK, stop=["END"])
    assert stopped.choices[0].message.content is not None
    assert stopped.choices[0].message.content.rstrip().endswith("gamma")
    assert stopped.choices[0].finish_reason == "stop"
    cut = sdk.chat.completions.create(model="test", messages=ASK, max_completion_tokens=5)
    assert cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.content == "alpha beta gamma alp"  # 20 characters: 5 tokens of 4


def test_sampling_options_reach_every_model_call(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = SUB_CALL
    client(served).chat.completions.create(model="test", messages=ASK, temperature=0.2, seed=7)
    options = [entry["options"] for entry in upstream.requests_log]
    assert len(options) == 3
    assert all(o.get("temperature") == 0.2 and o.get("seed") == 7 for o in options)


def test_system_messages_are_instructions_and_the_conversation_is_the_context(
    served: Served, upstream: FakeOpenAIServer
) -> None:
    upstream.root = ["```repl\nprint(context[1]['content'])\n```", "FINAL(ok)"]
    messages = [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "second question"},
    ]
    client(served).chat.completions.create(model="test", messages=messages)
    first = upstream.requests_log[0]["messages"]
    assert "Answer in French." in first[0]["content"]
    second = json.dumps(upstream.requests_log[1]["messages"])
    assert "first answer" in second  # what the code printed, read from the REPL's context


def test_a_failed_run_is_a_500_server_error(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.fail_next(status=401, message="bad upstream key", count=10)
    with pytest.raises(openai.InternalServerError) as caught:
        client(served).chat.completions.create(model="test", messages=ASK)
    assert caught.value.code == "rlm_run_failed"


def test_a_body_over_the_limit_and_a_body_that_is_not_json_typed(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    served = serve(served_config(upstream, max_body_bytes=1_000))
    url = f"{served.base_url}/chat/completions"
    big = httpx.post(url, json={"model": "test", "messages": [{"role": "user", "content": "x" * 2_000}]})
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    form = httpx.post(url, data={"model": "test"})
    assert form.status_code == 400 and "Content-Type: application/json" in form.json()["error"]["message"]
    assert upstream.counters.requests == 0


def test_json_nested_too_deep_is_refused_and_the_server_goes_on(served: Served, upstream: FakeOpenAIServer) -> None:
    url = f"{served.base_url}/chat/completions"
    deep = httpx.post(url, content=b"[" * 100_000 + b"]" * 100_000, headers={"content-type": "application/json"})
    assert deep.status_code == 400 and "could not parse the JSON body" in deep.json()["error"]["message"]
    assert client(served).chat.completions.create(model="test", messages=ASK).choices[0].message.content == "42"


def test_a_failed_run_is_not_paid_for_three_times_by_the_sdks_retries(
    served: Served, upstream: FakeOpenAIServer
) -> None:
    """The openai SDK retries a 500 twice by default (LangChain's ChatOpenAI and LiteLLM through it): without a
    call cache each retry would be a whole new run. The server says ``x-should-retry: false``, which it obeys."""
    upstream.root = SUB_CALL
    upstream.fail_next(status=400, message="the upstream refuses this", count=10)
    with pytest.raises(openai.InternalServerError) as caught:
        openai.OpenAI(base_url=served.base_url, api_key="k").chat.completions.create(model="test", messages=ASK)
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert upstream.counters.requests == 1  # one run: the SDK's default max_retries=2 did not start two more


def test_with_the_call_cache_a_failed_run_leaves_retrying_to_the_client(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served], tmp_path: Path
) -> None:
    cache, _owned = open_cache(tmp_path / "calls.sqlite")
    served = serve(served_config(upstream, cache=cache))
    upstream.fail_next(status=400, message="the upstream refuses this", count=1)
    reply = openai.OpenAI(base_url=served.base_url, api_key="k").chat.completions.create(model="test", messages=ASK)
    assert reply.choices[0].message.content == "42"  # the SDK's retry ran again, and the upstream answered it


def test_the_answers_sources_are_lines_of_the_conversation(served: Served, upstream: FakeOpenAIServer) -> None:
    """Beside OpenAI's fields, ``rlm.sources`` names the lines of the conversation that reached a model and
    support the answer (the SDK keeps unknown fields); ``rlm.run_id`` is the trajectory's id."""
    notes = "\n".join(f"line {i}: nothing here" for i in range(200)) + "\nline 200: the vault code is 731-ALPHA\n"
    upstream.root = ["```repl\nprint(context[-80:])\n```", "FINAL(The vault code is 731-ALPHA.)"]
    messages = [{"role": "user", "content": notes + "What is the vault code?"}]
    reply = client(served).chat.completions.create(model="test", messages=messages)
    assert reply.model_extra is not None
    rlm = reply.model_extra["rlm"]
    assert reply.id == f"chatcmpl-{rlm['run_id']}"
    assert any("731-ALPHA" in s["excerpt"] for s in rlm["sources"]), rlm
    assert all(s["location"].startswith("context:") for s in rlm["sources"])


def test_the_answer_comes_with_the_sources_finished_within_sources_timeout_and_says_what_was_not(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: the sources never hold the answer past ``--sources-timeout``; cut, ``rlm.sources_note`` says so,
    and a streamed reply says "finding sources" while they are found."""
    served = serve(served_config(upstream, sources_timeout=0.3))
    notes = "\n".join(f"line {i}: nothing here" for i in range(200)) + "\nline 200: the vault code is 731-ALPHA\n"
    messages = [{"role": "user", "content": notes + "What is the vault code?"}]
    with held_claims(monkeypatch):
        upstream.root = ["```repl\nprint(context[-80:])\n```", "FINAL(The vault code is 731-ALPHA.)"]
        reply = client(served).chat.completions.create(model="test", messages=messages)
        upstream.root = ["```repl\nprint(context[-80:])\n```", "FINAL(The vault code is 731-ALPHA.)"]
        stream = list(client(served).chat.completions.create(model="test", messages=messages, stream=True))
    assert reply.choices[0].message.content == "The vault code is 731-ALPHA."
    assert reply.model_extra is not None
    rlm = reply.model_extra["rlm"]
    assert any("731-ALPHA" in s["excerpt"] for s in rlm["sources"]), rlm
    assert rlm["sources_note"] == "sources not finished, cut at 0.3 s (sources_timeout): the claims were not checked"
    progress = "".join(
        (chunk.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for chunk in stream if chunk.choices
    )
    assert "finding sources" in progress
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "The vault code is 731-ALPHA."


def test_a_sources_timeout_below_zero_is_refused(upstream: FakeOpenAIServer) -> None:
    with pytest.raises(ConfigurationError, match="--sources-timeout -1 must be 0"):
        served_config(upstream, sources_timeout=-1)


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "user", "content": ""}], "messages[0].content"),
        ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " \n"}], "messages[1].content"),
        ([{"role": "user", "content": [{"type": "text", "text": ""}]}], "messages[0].content"),
        (
            [
                {"role": "user", "content": "a report"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": ""},
            ],
            "messages[2].content",
        ),
    ],
)
def test_an_empty_user_message_is_a_400_before_any_model_call(
    served: Served, upstream: FakeOpenAIServer, messages: list[dict[str, object]], param: str
) -> None:
    """Issue 51: an empty user message was a 500 ``rlm_run_failed`` (the run found out); it is the caller's error."""
    with pytest.raises(openai.BadRequestError) as caught:
        client(served).chat.completions.create(model="test", messages=messages)  # type: ignore[arg-type]
    assert caught.value.status_code == 400 and caught.value.param == param
    assert f"{param} is empty" in caught.value.message and "give it the question" in caught.value.message
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "invalid_request_error"
    assert upstream.counters.requests == 0
