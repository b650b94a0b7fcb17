"""Issue 48, item 10: malformed numbers and depth gave plain-text 500s with a traceback in the log.

``temperature``, ``top_p`` or ``frequency_penalty`` of ``10**400`` (an int ``math.isfinite`` cannot take) and
tool parameters nested 400 deep (jsonschema ran out of stack) were 500s, which the openai SDK retries twice.
Each is a 400 in OpenAI's error shape naming the field now, and nothing is logged as an error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.serve.conftest import Served, served_config

HUGE = "1" + "0" * 400  # 10**400 written out: a JSON number Python reads as an int
NUMBERS = [HUGE, "-" + HUGE, "1e400", "-1e400", "Infinity", "NaN"]


class Errors(logging.Handler):
    """Every record at ERROR or above, from the server's loggers (uvicorn's do not propagate)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with FakeOpenAIServer(["FINAL(42)"]) as upstream:
        served = Served(served_config(upstream))
        try:
            yield served
        finally:
            served.close()


@pytest.fixture
def errors() -> Iterator[Errors]:
    handler = Errors()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "uvicorn", "rlm_adapters", "")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


def post_text(served: Served, body: str) -> httpx.Response:
    return httpx.post(
        f"{served.base_url}/chat/completions", content=body.encode(), headers={"content-type": "application/json"}
    )


def refusal(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    return error


ASK = '"model": "test", "messages": [{"role": "user", "content": "hi"}]'


@pytest.mark.parametrize("field", ["temperature", "top_p", "frequency_penalty", "presence_penalty"])
@pytest.mark.parametrize("number", NUMBERS, ids=["10**400", "-10**400", "1e400", "-1e400", "Infinity", "NaN"])
def test_a_sampling_number_past_floats_is_a_400_naming_it(
    served: Served, errors: Errors, field: str, number: str
) -> None:
    error = refusal(post_text(served, f'{{{ASK}, "{field}": {number}}}'))
    assert error["param"] == field and field in error["message"]
    assert errors.records == []


@pytest.mark.parametrize("field", ["seed", "max_tokens", "max_completion_tokens"])
def test_an_integer_past_64_bits_is_a_400_naming_it(served: Served, errors: Errors, field: str) -> None:
    error = refusal(post_text(served, f'{{{ASK}, "{field}": {HUGE}}}'))
    assert error["param"] == field
    assert errors.records == []


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_tool_parameters_nested_400_deep_are_a_400_naming_the_tool(served: Served, errors: Errors) -> None:
    tools = [
        {"type": "function", "function": {"name": "fine", "parameters": nested(3)}},
        {"type": "function", "function": {"name": "deep", "parameters": nested(400)}},
    ]
    error = refusal(post_text(served, json.dumps({"model": "test", "messages": [{"role": "user", "content": "hi"}],
                                                  "tools": tools})))  # fmt: skip
    assert error["param"] == "tools[1].function.parameters"
    assert "the parameters of 'deep'" in error["message"] and "nested 400 levels deep" in error["message"]
    assert errors.records == []


def test_an_answer_schema_nested_400_deep_is_a_400(served: Served, errors: Errors) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": nested(400)}}
    body = {"model": "test", "messages": [{"role": "user", "content": "hi"}], "response_format": fmt}
    error = refusal(post_text(served, json.dumps(body)))
    assert error["param"] == "response_format.json_schema.schema" and "nested 400 levels deep" in error["message"]
    assert errors.records == []


@pytest.mark.parametrize("field", ["audio", "modalities", "response_format", "tool_choice"])
def test_a_refused_value_nested_as_deep_as_json_allows_is_a_400(served: Served, errors: Errors, field: str) -> None:
    """The refusal quotes the value: one nested 900 deep could not be written back out (RecursionError)."""
    deep = "[" * 900 + "]" * 900
    error = refusal(post_text(served, f'{{{ASK}, "{field}": {deep}}}'))
    assert error["param"] == field
    assert errors.records == []
