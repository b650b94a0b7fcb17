"""``rlm serve``'s direct route (issue 50): a short conversation is one plain call whose tokens stream as they
arrive; the ``direct_below_tokens`` key of ``--model``, its default, and what the answer says of the route."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from rlm_adapters.core.adapter_kit import CHAT_DIRECT_BELOW_TOKENS
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.serve import ServeConfig
from rlm_adapters.serve.served_models import parse_model
from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import Served, served_config

ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Where is the Eiffel tower?"}]
REPLY = "It stands in Paris, on the Champ de Mars."


@pytest.fixture
def direct(upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]) -> Served:
    upstream.leaf = lambda prompt: REPLY
    return serve(served_config(upstream, "quick=root-model,base_url={url},direct_below_tokens=2000"))


def test_the_key_its_default_and_a_bad_value() -> None:
    assert parse_model("m=root").direct_below_tokens == CHAT_DIRECT_BELOW_TOKENS
    assert parse_model("m=root,direct_below_tokens=500").direct_below_tokens == 500
    assert parse_model("m=root,direct_below_tokens=off").direct_below_tokens is None
    for bad in ("0", "-3", "many", "1.5"):
        with pytest.raises(ConfigurationError) as caught:
            parse_model(f"m=root,direct_below_tokens={bad}")
        assert str(caught.value) == (
            f"--model 'm=root,direct_below_tokens={bad}': direct_below_tokens={bad!r} must be a whole number of "
            "tokens >= 1, or off"
        )


def test_a_short_conversation_is_one_plain_call_sent_as_its_messages(
    direct: Served, upstream: FakeOpenAIServer
) -> None:
    sdk = openai.OpenAI(base_url=direct.base_url, api_key="k", max_retries=0)
    reply = sdk.chat.completions.create(model="quick", messages=ASK)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == REPLY
    assert upstream.counters.requests == 1 and upstream.counters.root_requests == 0
    assert upstream.requests_log[0]["messages"] == ASK
    details = reply.model_extra["rlm"]  # type: ignore[index]
    assert details["route"] == "direct" and "under direct_below_tokens=2,000" in details["route_reason"]
    assert reply.usage is not None and reply.usage.prompt_tokens == upstream.counters.prompt_tokens


def test_the_stream_carries_the_model_s_tokens_as_they_arrive(direct: Served, upstream: FakeOpenAIServer) -> None:
    sdk = openai.OpenAI(base_url=direct.base_url, api_key="k", max_retries=0)
    chunks = list(
        sdk.chat.completions.create(
            model="quick",
            messages=ASK,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(texts) == REPLY
    assert len(texts) == upstream.counters.completion_tokens > 1  # each piece as the upstream streamed it
    progress = [c.choices[0].delta.model_extra.get("reasoning_content") for c in chunks if c.choices]
    assert next(p for p in progress if p).startswith("direct call to root model root-model: the prompt is")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == upstream.counters.completion_tokens


def test_max_tokens_and_stop_still_cut_a_streamed_answer(direct: Served) -> None:
    sdk = openai.OpenAI(base_url=direct.base_url, api_key="k", max_retries=0)

    def streamed(**options: object) -> str:
        chunks = sdk.chat.completions.create(model="quick", messages=ASK, stream=True, **options)  # type: ignore[call-overload]
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    whole = sdk.chat.completions.create(model="quick", messages=ASK, max_tokens=4)  # type: ignore[arg-type]
    assert streamed(max_tokens=4) == whole.choices[0].message.content and len(
        whole.choices[0].message.content or ""
    ) < len(REPLY)
    assert streamed(stop=["Champ"]) == "It stands in Paris, on the "


def test_a_conversation_over_the_threshold_runs_the_rlm(
    upstream: FakeOpenAIServer, serve: Callable[[ServeConfig], Served]
) -> None:
    served = serve(served_config(upstream, "small=root-model,base_url={url},direct_below_tokens=5"))
    sdk = openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)
    reply = sdk.chat.completions.create(model="small", messages=ASK)  # type: ignore[arg-type]
    assert reply.model_extra["rlm"]["route"] == "rlm"  # type: ignore[index]
    assert upstream.counters.root_requests >= 1
