"""Every field of the installed openai SDK's ``CompletionCreateParams`` is used (its effect asserted here) or
refused with OpenAI's 400 naming it; a field the SDK does not have is refused too. When the SDK grows a field,
`test_every_sdk_field_has_a_row` fails until this table (and the server) say what it does."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from openai.types.chat import completion_create_params

from rlm_adapters.serve.request import KNOWN
from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import Served

ASK = [{"role": "user", "content": "What is the magic number?"}]
ANSWER = "the magic number is forty-two, said the run"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@dataclass
class Outcome:
    """What one request showed: its status and JSON (or SSE lines), the upstream's requests, the log."""

    status: int
    body: Any
    lines: list[str]
    upstream: list[dict[str, Any]]
    log: str

    @property
    def content(self) -> str:
        return str(self.body["choices"][0]["message"]["content"])

    @property
    def finish(self) -> str:
        return str(self.body["choices"][0]["finish_reason"])

    def root_prompt(self) -> str:
        return json.dumps(next(e["messages"] for e in self.upstream if e["root"]))


Check = Callable[[Outcome], bool]


def sent_upstream(name: str, value: Any) -> Check:
    """Every model call of the run (root and sub-model) was sent `name`=`value`."""
    return lambda o: len(o.upstream) >= 2 and all(e["options"].get(name) == value for e in o.upstream)


def answered(o: Outcome) -> bool:
    return o.status == 200 and o.content == ANSWER and o.finish == "stop"


def logged(value: str) -> Check:
    return lambda o: answered(o) and value in o.log


@dataclass
class Row:
    """One field at one value: refused (400, ``param`` naming it), or `check` holds of the answer."""

    name: str
    value: Any
    check: Check | None = None  # None: refused
    extra: dict[str, Any] = field(default_factory=dict)  # other fields the value needs
    root: list[str] | None = None  # the root model's script, when not the plain answer

    @property
    def id(self) -> str:
        return f"{self.name}={json.dumps(self.value)[:30]}"


ROWS = [
    Row("messages", ASK, answered),
    Row("model", "test", answered),
    Row("temperature", 0.3, sent_upstream("temperature", 0.3)),
    Row("temperature", 2.5),
    Row("top_p", 0.5, sent_upstream("top_p", 0.5)),
    Row("frequency_penalty", 0.1, sent_upstream("frequency_penalty", 0.1)),
    Row("presence_penalty", -0.1, sent_upstream("presence_penalty", -0.1)),
    Row("seed", 7, sent_upstream("seed", 7)),
    Row("seed", "seven"),
    Row("reasoning_effort", "low", sent_upstream("reasoning_effort", "low")),
    Row("reasoning_effort", "extreme"),
    Row("verbosity", "high", sent_upstream("verbosity", "high")),
    Row("verbosity", "loud"),
    Row("max_completion_tokens", 3, lambda o: o.content == ANSWER[:12] and o.finish == "length"),
    Row("max_tokens", 3, lambda o: o.content == ANSWER[:12] and o.finish == "length"),
    Row("max_tokens", 0),
    Row("stop", ["forty"], lambda o: o.content == "the magic number is " and o.finish == "stop"),
    Row("stop", ["a", "b", "c", "d", "e"]),
    Row("stream", True, lambda o: o.lines[-1] == "data: [DONE]" and ANSWER[:10] in "\n".join(o.lines)),
    Row(
        "stream_options",
        {"include_usage": True},
        lambda o: json.loads(o.lines[-2][6:])["usage"]["total_tokens"] > 0,
        {"stream": True},
    ),
    Row("stream_options", {"include_obfuscation": True}, None, {"stream": True}),
    Row("tools", [WEATHER], lambda o: "get_weather" in o.root_prompt() and answered(o)),
    Row("tools", [{"type": "custom", "custom": {"name": "x"}}]),
    Row(
        "tool_choice",
        "required",
        lambda o: "must end with at least one tool call" in o.root_prompt(),
        {"tools": [WEATHER]},
        ["```repl\ncall_tool('get_weather', city='Oslo')\n```"],
    ),
    Row(
        "tool_choice",
        {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}},
        None,
        {"tools": [WEATHER]},
    ),
    Row("parallel_tool_calls", False, lambda o: "Call one tool per turn." in o.root_prompt(), {"tools": [WEATHER]}),
    Row(
        "response_format",
        {"type": "json_object"},
        lambda o: json.loads(o.content) == {"city": "Oslo"},
        root=["```repl\nanswer = {'city': 'Oslo'}\nFINAL_VAR('answer')\n```"],
    ),
    Row("response_format", {"type": "yaml"}),
    Row("user", "user-1234", logged("user-1234")),
    Row("safety_identifier", "hash-5678", logged("hash-5678")),
    Row("prompt_cache_key", "key-9012", logged("key-9012")),
    Row("metadata", {"team": "blue-3456"}, logged("blue-3456")),
    Row("metadata", {"k": 1}),
    Row("n", 1, answered),
    Row("n", 2),
    Row("store", False, answered),
    Row("store", True),
    Row("logprobs", False, answered),
    Row("logprobs", True),
    Row("top_logprobs", 0, answered),
    Row("top_logprobs", 3),
    Row("logit_bias", {}, answered),
    Row("logit_bias", {"50256": -100}),
    Row("service_tier", "auto", answered),
    Row("service_tier", "flex"),
    Row("modalities", ["text"], answered),
    Row("modalities", ["text", "audio"]),
    Row("audio", {"voice": "alloy", "format": "mp3"}),
    Row("prediction", {"type": "content", "content": "x"}),
    Row("web_search_options", {}),
    Row("prompt_cache_retention", "24h"),
    Row("prompt_cache_options", {"mode": "explicit"}),
    Row("moderation", {"model": "omni-moderation-latest"}),
    Row("functions", [{"name": "f"}]),
    Row("function_call", "auto"),
    Row("frobnicate", 1),  # not an SDK field: OpenAI's "Unrecognized request argument supplied"
]


def sdk_fields() -> set[str]:
    params = completion_create_params.CompletionCreateParamsStreaming
    return set(params.__required_keys__ | params.__optional_keys__)


def test_every_sdk_field_has_a_row() -> None:
    fields = sdk_fields()
    assert len(fields) >= 37  # openai 3.57 has 37: this reads the installed SDK, not a copy
    assert fields - {row.name for row in ROWS} == set()
    assert fields <= KNOWN  # each is parsed (used or refused at a value), none falls to "unrecognized"
    assert KNOWN - fields == set()  # and the server knows of no field the SDK does not send


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_each_field_is_used_or_refused(
    row: Row, served: Served, upstream: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rlm_adapters.serve")
    upstream.root = row.root or ["```repl\nx = llm_query('the magic number is 42')\n```", f"FINAL({ANSWER})"]
    body = {"model": "test", "messages": ASK, **row.extra, row.name: row.value}
    with httpx.stream("POST", f"{served.base_url}/chat/completions", json=body, timeout=60) as response:
        text = response.read().decode()
    lines = [line for line in text.splitlines() if line]
    stream = response.headers["content-type"].startswith("text/event-stream")
    outcome = Outcome(response.status_code, None if stream else json.loads(text), lines, upstream.requests_log,
                      caplog.text)  # fmt: skip
    if row.check is None:
        assert outcome.status == 400, text
        assert outcome.body["error"]["type"] == "invalid_request_error"
        assert outcome.body["error"]["param"].split(".")[0].split("[")[0] == row.name
        assert upstream.counters.requests == 0
    else:
        assert outcome.status == 200, text
        assert row.check(outcome), text[:2000]
