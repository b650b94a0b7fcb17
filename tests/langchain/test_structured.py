"""`ChatRLM.with_structured_output` on the engine's typed answers: each of LangChain's methods, include_raw,
the failures, and the schema shapes LangChain users pass."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.exceptions import OutputParserException
from langchain_core.messages import AIMessage
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from rlm_adapters import ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.langchain import ChatRLM

GOOD = "```repl\nanswer = {'setup': 'Why?', 'punchline': 'Because.'}\nFINAL_VAR('answer')\n```"
BAD = "```repl\nanswer = {'setup': 'only'}\nFINAL_VAR('answer')\n```"


class Joke(BaseModel):
    """A joke."""

    setup: str
    punchline: str = Field(min_length=2)


class JokeDict(TypedDict):
    setup: str
    punchline: str


def chat(*replies: str, seen: list[list[Message]] | None = None) -> ChatRLM:
    def root(messages: list[Message]) -> str:
        if seen is not None:
            seen.append(list(messages))
        return replies[min(sum(m["role"] == "assistant" for m in messages), len(replies) - 1)]

    return ChatRLM(direct_below_tokens=None, backend=ScriptedModel(root, model_name="root"), environment="local")


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
@pytest.mark.parametrize("schema", [Joke, JokeDict, Joke.model_json_schema()], ids=["pydantic", "typeddict", "dict"])
def test_every_method_gives_the_value(method: str, schema: Any) -> None:
    seen: list[list[Message]] = []
    parsed = chat(GOOD, seen=seen).with_structured_output(schema, method=method).invoke("a joke")  # type: ignore[arg-type]
    expected = {"setup": "Why?", "punchline": "Because."}
    assert parsed == (Joke(**expected) if schema is Joke else expected)
    assert "matching this JSON schema" in seen[0][0]["content"]  # the engine showed the root the schema


def test_function_calling_carries_the_value_as_a_tool_call() -> None:
    out = chat(GOOD).with_structured_output(Joke, method="function_calling", include_raw=True).invoke("a joke")
    raw = out["raw"]
    assert isinstance(raw, AIMessage) and raw.content == ""
    assert raw.tool_calls[0]["name"] == "Joke" and raw.tool_calls[0]["args"]["punchline"] == "Because."
    assert out["parsed"] == Joke(setup="Why?", punchline="Because.") and out["parsing_error"] is None
    assert raw.response_metadata["finish_reason"] == "final" and raw.usage_metadata is not None


def test_json_mode_without_a_schema_takes_any_object() -> None:
    parsed = chat(GOOD).with_structured_output(None, method="json_mode").invoke("a joke")  # type: ignore[arg-type]
    assert parsed == {"setup": "Why?", "punchline": "Because."}
    with pytest.raises(ValueError, match="method='json_schema' needs a schema"):
        chat(GOOD).with_structured_output(None)  # type: ignore[arg-type]


def test_pydantic_constraints_are_the_engines_check() -> None:
    seen: list[list[Message]] = []
    short = "```repl\nFINAL_VAR({'setup': 'a', 'punchline': 'b'})\n```"
    parsed = chat(short, GOOD, seen=seen).with_structured_output(Joke).invoke("a joke")
    assert parsed == Joke(setup="Why?", punchline="Because.")
    assert "punchline: String should have at least 2 characters" in seen[1][-1]["content"]


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_include_raw_keeps_the_last_value_and_the_error_when_none_was_valid(method: str) -> None:
    out = chat(BAD).with_structured_output(Joke, method=method, include_raw=True).invoke("a joke")  # type: ignore[arg-type]
    assert out["parsed"] is None and isinstance(out["parsing_error"], OutputParserException)
    assert "(error)" in str(out["parsing_error"]) and "punchline: Field required" in str(out["parsing_error"])
    assert out["raw"].content == '{"setup": "only"}'  # the last value the model gave
    with pytest.raises(OutputParserException, match="punchline: Field required"):
        chat(BAD).with_structured_output(Joke, method=method).invoke("a joke")  # type: ignore[arg-type]


def test_unknown_methods_and_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="method='xml' is not one of"):
        chat(GOOD).with_structured_output(Joke, method="xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"unsupported arguments \['tools'\]"):
        chat(GOOD).with_structured_output(Joke, tools=[])
    assert chat(GOOD).with_structured_output(Joke, strict=True).invoke("a joke") == Joke(
        setup="Why?", punchline="Because."
    )
