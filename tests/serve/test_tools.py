"""``tools`` / ``tool_choice`` come back as ``message.tool_calls``; ``response_format`` is the engine's typed answer."""

from __future__ import annotations

import json

import openai
import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import Served

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def sdk(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)


def test_a_tool_call_and_its_result_round_trip(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = ["```repl\ncall_tool('get_weather', city='Paris')\n```"]
    reply = sdk(served).chat.completions.create(model="test", messages=ASK, tools=[WEATHER])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")

    upstream.reset_counters()
    upstream.root = ["```repl\nprint(context[-1]['content'])\n```", "FINAL(sunny and 21 C)"]
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    answer = sdk(served).chat.completions.create(model="test", messages=messages, tools=[WEATHER])  # type: ignore[arg-type]
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content == "sunny and 21 C"
    question = json.dumps(upstream.requests_log[0]["messages"])
    assert "It ends with 1 tool result(s)" in question
    assert "sunny, 21 C" in json.dumps(upstream.requests_log[1]["messages"])  # printed from the REPL


def test_a_streamed_tool_call(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = ["```repl\ncall_tool('get_weather', city='Oslo')\n```"]
    chunks = list(
        sdk(served).chat.completions.create(
            model="test", messages=ASK, tools=[WEATHER], tool_choice="required", stream=True
        )
    )
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.function.name) for tc in calls if tc.function] == [(0, "get_weather")]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_a_named_tool_choice_and_bad_tools(served: Served, upstream: FakeOpenAIServer) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(served).chat.completions.create(
            model="test", messages=ASK, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}
        )
    assert caught.value.param == "tool_choice"
    bad_schema = {"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}
    with pytest.raises(openai.BadRequestError, match="not a valid JSON schema") as schema_error:
        sdk(served).chat.completions.create(model="test", messages=ASK, tools=[bad_schema])  # type: ignore[list-item]
    assert schema_error.value.param == "tools[0].function.parameters"  # issue 48: the field, not the list
    with pytest.raises(openai.BadRequestError, match="only function tools"):
        sdk(served).chat.completions.create(model="test", messages=ASK, tools=[{"type": "custom", "custom": {}}])  # type: ignore[list-item]
    assert upstream.counters.requests == 0


SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "weather",
        "schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
            "required": ["city", "celsius"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


def test_a_json_schema_response_format_is_the_typed_answer(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = ["```repl\nanswer = {'city': 'Paris', 'celsius': 21}\nFINAL_VAR('answer')\n```"]
    reply = sdk(served).chat.completions.create(model="test", messages=ASK, response_format=SCHEMA)  # type: ignore[arg-type]
    assert json.loads(reply.choices[0].message.content or "") == {"city": "Paris", "celsius": 21}
    assert "celsius" in upstream.requests_log[0]["messages"][0]["content"]  # the root model is shown the schema


def test_the_sdks_parse_helper_gets_a_pydantic_value(served: Served, upstream: FakeOpenAIServer) -> None:
    from pydantic import BaseModel

    class Weather(BaseModel):
        city: str
        celsius: int

    upstream.root = ["```repl\nanswer = {'city': 'Oslo', 'celsius': -3}\nFINAL_VAR('answer')\n```"]
    parsed = sdk(served).chat.completions.parse(model="test", messages=ASK, response_format=Weather)
    assert parsed.choices[0].message.parsed == Weather(city="Oslo", celsius=-3)


def test_an_answer_that_never_matches_the_schema_is_an_error(served: Served, upstream: FakeOpenAIServer) -> None:
    upstream.root = ["```repl\nanswer = {'city': 'Paris'}\nFINAL_VAR('answer')\n```"]
    with pytest.raises(openai.APIStatusError) as caught:
        sdk(served).chat.completions.create(model="test", messages=ASK, response_format=SCHEMA)  # type: ignore[arg-type]
    assert caught.value.status_code == 500
