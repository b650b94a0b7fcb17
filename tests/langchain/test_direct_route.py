"""`ChatRLM` as a drop-in for a plain chat model (issue 50): a short question is one plain call on the direct
route, its tokens streamed as they arrive (stream, astream, invoke's callbacks), typed answers and tool calls
included; on the RLM route, progress arrives as ``rlm_progress`` custom events before the answer."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from pydantic import BaseModel

from rlm_adapters.core.adapter_kit import CHAT_DIRECT_BELOW_TOKENS
from rlm_adapters.langchain import ChatRLM
from rlm_adapters.testing import FakeOpenAIServer

QUESTION = ("In one sentence: what is the capital of France, and on which river does it lie? " * 3)[:200]
REPLY = "Paris, the capital of France, lies on the Seine."


def chat(server: FakeOpenAIServer, **options: Any) -> ChatRLM:
    return ChatRLM(model="root-model", base_url=server.base_url, api_key="k", environment="local", **options)


def test_a_short_question_is_one_plain_call_by_default(fake_server: FakeOpenAIServer) -> None:
    fake_server.leaf = lambda prompt: REPLY
    llm = chat(fake_server)
    assert llm.direct_below_tokens == CHAT_DIRECT_BELOW_TOKENS
    message = llm.invoke(QUESTION)
    assert message.content == REPLY
    counters = fake_server.counters
    assert (counters.requests, counters.root_requests) == (1, 0)
    assert fake_server.requests_log[0]["messages"] == [{"role": "user", "content": QUESTION}]
    assert message.usage_metadata is not None
    assert message.usage_metadata["input_tokens"] == counters.prompt_tokens
    assert message.usage_metadata["output_tokens"] == counters.completion_tokens
    assert message.response_metadata["route"] == "direct"
    assert "under direct_below_tokens=16,000" in message.response_metadata["route_reason"]


def test_stream_gives_the_model_s_tokens_as_they_arrive(fake_server: FakeOpenAIServer) -> None:
    fake_server.leaf = lambda prompt: REPLY
    chunks = list(chat(fake_server).stream(QUESTION))
    texts = [c.content for c in chunks if c.content]
    assert "".join(texts) == REPLY  # type: ignore[arg-type]
    assert len(texts) == fake_server.counters.completion_tokens > 1
    last = chunks[-1]
    assert last.chunk_position == "last" and last.content == "" and last.usage_metadata is not None
    assert last.response_metadata["route"] == "direct"


async def test_astream_too(fake_server: FakeOpenAIServer) -> None:
    fake_server.leaf = lambda prompt: REPLY
    chunks = [chunk async for chunk in chat(fake_server).astream(QUESTION)]
    assert "".join(str(c.content) for c in chunks) == REPLY
    assert len([c for c in chunks if c.content]) > 1


def test_invoke_with_streaming_sends_each_token_once_to_the_callbacks(fake_server: FakeOpenAIServer) -> None:
    fake_server.leaf = lambda prompt: REPLY
    tokens: list[str] = []

    class Tokens(BaseCallbackHandler):
        def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
            tokens.append(token)

    message = chat(fake_server, streaming=True).invoke(QUESTION, config={"callbacks": [Tokens()]})
    assert message.content == REPLY and "".join(tokens) == REPLY and len(tokens) > 2


def test_a_stop_sequence_is_honoured_though_the_answer_streams(fake_server: FakeOpenAIServer) -> None:
    fake_server.leaf = lambda prompt: REPLY
    chunks = list(chat(fake_server).stream(QUESTION, stop=["Seine"]))
    assert "".join(str(c.content) for c in chunks) == "Paris, the capital of France, lies on the "


class Capital(BaseModel):
    city: str
    river: str


def test_structured_output_and_tools_on_the_direct_route(fake_server: FakeOpenAIServer) -> None:
    fake_server.leaf = lambda prompt: '{"city": "Paris", "river": "Seine"}'
    typed = chat(fake_server).with_structured_output(Capital).invoke(QUESTION)
    assert typed == Capital(city="Paris", river="Seine") and fake_server.counters.requests == 1

    def lookup(city: str) -> str:
        """Facts about a city."""
        return city

    fake_server.leaf = lambda prompt: 'CALL_TOOL lookup {"city": "Paris"}'
    called = chat(fake_server).bind_tools([lookup]).invoke(QUESTION)
    assert [(c["name"], c["args"]) for c in called.tool_calls] == [("lookup", {"city": "Paris"})]
    assert called.response_metadata["route"] == "direct"


async def test_on_the_rlm_route_progress_events_come_before_the_answer(fake_server: FakeOpenAIServer) -> None:
    fake_server.root = ["```repl\nanswer = 'Paris'\n```", 'FINAL_VAR("answer")']
    kinds: list[str] = []
    async for event in chat(fake_server, direct_below_tokens=10).astream_events(QUESTION, version="v2"):
        if event["event"] == "on_custom_event" and event["name"] == "rlm_progress":
            kinds.append(str(event["data"]["kind"]))
        elif event["event"] == "on_chat_model_stream" and event["data"]["chunk"].content:
            kinds.append("answer")
    assert kinds[0] == "run_start" and "root_call" in kinds and "cell" in kinds
    assert kinds.index("answer") > kinds.index("final")
