"""Real clients pointed at `rlm serve`: LiteLLM (``openai/<name>`` with ``api_base``) and LangChain's ``ChatOpenAI``."""

from __future__ import annotations

import importlib
import os
from typing import Any

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.extras import installed, needs
from tests.serve.conftest import Served

ASK = [{"role": "user", "content": "What is the magic number?"}]
SUB_CALL = ["```repl\nx = llm_query('the magic number is 4242')\nprint(x)\n```", "FINAL(4242)"]


@pytest.fixture
def litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price-list fetch at import
    if not installed("litellm"):
        pytest.skip('needs litellm (pip install "rlm-adapters[litellm]")')
    return importlib.import_module("litellm")


def test_litellm_completion_and_stream(litellm: Any, served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = SUB_CALL
    reply = litellm.completion(model="openai/test", api_base=served.base_url, api_key="k", messages=ASK)
    assert reply.choices[0].message.content == "4242"
    assert reply.usage.prompt_tokens == upstream.counters.prompt_tokens
    chunks = list(
        litellm.completion(model="openai/test", api_base=served.base_url, api_key="k", messages=ASK, stream=True)
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "4242"
    progress = [getattr(c.choices[0].delta, "reasoning_content", None) for c in chunks if c.choices]
    assert any(p and p.startswith("RLM run started") for p in progress)  # LiteLLM keeps reasoning_content


async def test_litellm_async(litellm: Any, served: Served) -> None:
    reply = await litellm.acompletion(model="openai/test", api_base=served.base_url, api_key="k", messages=ASK)
    assert reply.choices[0].message.content == "42"


@needs("langchain_openai", "dev")
def test_langchain_chat_openai_invoke_stream_and_tools(served: Served, upstream: FakeOpenAIServer) -> None:
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(model="test", base_url=served.base_url, api_key="k", max_retries=0)  # type: ignore[arg-type]
    upstream.root = SUB_CALL
    message = llm.invoke("What is the magic number?")
    assert message.content == "4242"
    assert message.usage_metadata is not None
    assert message.usage_metadata["input_tokens"] == upstream.counters.prompt_tokens
    chunks = list(llm.stream("What is the magic number?"))
    assert "".join(str(c.content) for c in chunks) == "4242"  # ChatOpenAI drops reasoning_content: no progress
    assert not any("RLM run started" in str(c.additional_kwargs) for c in chunks)

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "sunny"

    upstream.root = ["```repl\ncall_tool('get_weather', city='Paris')\n```"]
    called = llm.bind_tools([get_weather]).invoke("Weather in Paris?")
    assert [(c["name"], c["args"]) for c in called.tool_calls] == [("get_weather", {"city": "Paris"})]
