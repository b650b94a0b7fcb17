"""`ChatRLM.bind_tools`: any tool LangChain accepts, its choices, the calls as `AIMessage.tool_calls` (and
stream chunks), a conversation's tool calls and results in `context`, and a thread's steps in one REPL."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from rlm_adapters import Message, ScriptedModel
from rlm_adapters.langchain import ChatRLM
from rlm_adapters.testing import turn_of


@tool
def search(query: str) -> str:
    """Search the notes."""
    return f"found {query}"


def lookup(key: str, limit: int = 3) -> str:
    """Look a key up."""
    return key


class Weather(BaseModel):
    """Get the weather."""

    city: str = Field(description="A city.")
    days: int = Field(ge=1, le=7)


class Ticket(TypedDict):
    """Open a ticket."""

    title: str


RAW = {"name": "ping", "description": "Ping a host.", "parameters": {"type": "object", "properties": {}}}


def repl(code: str) -> str:
    return f"```repl\n{code}\n```"


def chat(root: Any, **options: Any) -> ChatRLM:
    return ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel(root, model_name="root"), environment="local", **options
    )


def by_turn(*replies: str) -> Any:
    def reply(messages: list[Message]) -> str:
        return replies[min(turn_of(messages), len(replies) - 1)]  # type: ignore[arg-type]

    return reply


def merged(chunks: list[AIMessageChunk]) -> AIMessageChunk:
    full = chunks[0]
    for chunk in chunks[1:]:
        full = full + chunk
    return full


def test_every_kind_of_tool_langchain_accepts() -> None:
    root = ScriptedModel(
        by_turn(
            repl(
                'call_tool("search", query="cats")\ncall_tool("lookup", key="k")\n'
                'call_tool("Weather", city="Oslo", days=2)\ncall_tool("Ticket", title="t")\ncall_tool("ping")'
            )
        ),
        model_name="root",
    )
    llm = ChatRLM(direct_below_tokens=None, backend=root, environment="local").bind_tools(
        [search, lookup, Weather, Ticket, RAW]
    )
    message = llm.invoke("do everything")
    assert isinstance(message, AIMessage) and message.content == ""
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [
        ("search", {"query": "cats"}),
        ("lookup", {"key": "k"}),
        ("Weather", {"city": "Oslo", "days": 2}),
        ("Ticket", {"title": "t"}),
        ("ping", {}),
    ]
    assert all(c["id"] and c["type"] == "tool_call" for c in message.tool_calls)
    assert message.response_metadata["finish_reason"] == "tool_calls"
    assert [b["type"] for b in message.content_blocks] == ["tool_call"] * 5
    system = root.calls[0][0]["content"]
    assert "- `Weather`: Get the weather. Arguments (JSON schema): " in system and '"maximum":7' in system


def test_calls_are_checked_against_the_schema_and_sent_back() -> None:
    root = ScriptedModel(
        by_turn(repl('call_tool("Weather", city="Oslo", days=30)'), repl('call_tool("Weather", city="Oslo", days=3)')),
        model_name="root",
    )
    message = (
        ChatRLM(direct_below_tokens=None, backend=root, environment="local").bind_tools([Weather]).invoke("weather?")
    )
    assert "args['days']: 30 is greater than the maximum of 7" in root.calls[1][-1]["content"]
    assert [c["args"] for c in message.tool_calls] == [{"city": "Oslo", "days": 3}]
    assert message.invalid_tool_calls == []


def test_calls_still_bad_come_back_as_invalid_tool_calls_and_in_the_stream_metadata() -> None:
    llm = chat(by_turn(repl('call_tool("Weather", city="Oslo", days=0)\ncall_tool("search", query="ok")'))).bind_tools(
        [Weather, search]
    )
    message = llm.invoke("weather?")
    assert [c["name"] for c in message.tool_calls] == ["search"]
    (bad,) = message.invalid_tool_calls
    assert bad["name"] == "Weather" and json.loads(str(bad["args"])) == {"city": "Oslo", "days": 0}
    assert "0 is less than the minimum of 1" in str(bad["error"])
    streamed = merged(list(llm.stream("weather?")))
    # A stream cannot mark a parseable call invalid: it says so in the metadata, not in tool_calls.
    assert [c["name"] for c in streamed.tool_calls] == ["search"] and streamed.invalid_tool_calls == []
    assert streamed.response_metadata["invalid_tool_calls"][0]["name"] == "Weather"


def test_calls_stream_as_tool_call_chunks() -> None:
    llm = chat(by_turn(repl('call_tool("search", query="日本")\ncall_tool("lookup", key="k", limit=1)'))).bind_tools(
        [search, lookup]
    )
    chunks = list(llm.stream("find"))
    assert [len(c.tool_call_chunks) for c in chunks] == [0, 1, 1]
    assert chunks[-1].chunk_position == "last" and chunks[-1].usage_metadata is not None
    assert chunks[1].tool_call_chunks[0]["args"] == '{"query": "日本"}'
    full = merged(chunks)
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [
        ("search", {"query": "日本"}),
        ("lookup", {"key": "k", "limit": 1}),
    ]
    assert full.response_metadata["finish_reason"] == "tool_calls"


def test_without_a_call_the_answer_is_plain_text() -> None:
    message = chat(by_turn(repl("FINAL('no tool needed')"))).bind_tools([search]).invoke("hello")
    assert (message.content, message.tool_calls) == ("no tool needed", [])
    assert message.response_metadata["finish_reason"] == "final"


@pytest.mark.parametrize(
    ("choice", "engine"),
    [
        ("any", "required"),
        ("required", "required"),
        (True, "lookup"),
        ({"type": "function", "function": {"name": "lookup"}}, "lookup"),
        ({"type": "tool", "name": "lookup"}, "lookup"),
        ({"type": "any"}, "required"),
        ("lookup", "lookup"),
        ("auto", "auto"),
        (None, None),
    ],
)
def test_tool_choice_spellings(choice: Any, engine: str | None) -> None:
    bound = chat(["FINAL(x)"]).bind_tools([lookup], tool_choice=choice)
    assert bound.kwargs["tool_choice"] == engine  # type: ignore[attr-defined]


def test_a_required_call_is_enforced_with_the_model_told() -> None:
    root = ScriptedModel(by_turn(repl("FINAL('an answer')"), repl('call_tool("lookup", key="k")')), model_name="root")
    message = (
        ChatRLM(direct_below_tokens=None, backend=root, environment="local")
        .bind_tools([search, lookup], tool_choice="lookup")
        .invoke("x")
    )
    assert "This turn must end with a call of `lookup`" in root.calls[0][0]["content"]
    assert "must end with a call of `lookup` (tool_choice='lookup')" in root.calls[1][-1]["content"]
    assert [c["name"] for c in message.tool_calls] == ["lookup"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda llm: llm.bind_tools([search], tool_choice="fetch"), "tool_choice='fetch' must be"),
        (lambda llm: llm.bind_tools([search], tool_choice={"type": "weird"}), "is not a tool choice"),
        (lambda llm: llm.bind_tools([search], temperature=0), r"unsupported arguments \['temperature'\]"),
        (lambda llm: llm.bind_tools([search], strict=False), "always checks a call's arguments"),
        (lambda llm: llm.bind_tools([search], parallel_tool_calls="yes"), "parallel_tool_calls='yes'"),
        (lambda llm: llm.bind_tools([{"type": "function"}]), "is not a tool ChatRLM can call"),
        (lambda llm: llm.bind_tools(search), "takes a list of tools"),
        (lambda llm: llm.invoke("x", functions=[RAW]), "not the legacy functions="),
        (lambda llm: llm.invoke("x", tool_choice="any"), "was given without tools"),
    ],
)
def test_bad_tools_are_refused_in_one_line(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(chat(["FINAL(x)"]))


def test_strict_schemas_refuse_extra_keys() -> None:
    root = ScriptedModel(
        by_turn(repl('call_tool("lookup", key="k", limit=1, extra=1)'), repl('call_tool("lookup", key="k", limit=1)')),
        model_name="root",
    )
    message = (
        ChatRLM(direct_below_tokens=None, backend=root, environment="local")
        .bind_tools([lookup], strict=True)
        .invoke("x")
    )
    assert "Additional properties are not allowed ('extra' was unexpected)" in root.calls[1][-1]["content"]
    assert [c["args"] for c in message.tool_calls] == [{"key": "k", "limit": 1}]


def test_one_call_per_turn_when_parallel_calls_are_off() -> None:
    root = ScriptedModel(
        by_turn(
            repl('call_tool("search", query="a")\ncall_tool("search", query="b")'),
            repl('call_tool("search", query="a")'),
        ),
        model_name="root",
    )
    message = (
        ChatRLM(direct_below_tokens=None, backend=root, environment="local")
        .bind_tools([search], parallel_tool_calls=False)
        .invoke("x")
    )
    assert "Call one tool per turn." in root.calls[0][0]["content"]
    assert len(message.tool_calls) == 1


def conversation() -> list[BaseMessage]:
    return [
        HumanMessage("Find cats in the notes."),
        AIMessage("", tool_calls=[{"name": "search", "args": {"query": "cats"}, "id": "c1", "type": "tool_call"}]),
        ToolMessage("cats: " + "meow " * 50_000, tool_call_id="c1", name="search"),
    ]


def test_tool_calls_and_results_are_entries_of_the_context_never_the_prompt() -> None:
    code = (
        "call = context[1]['tool_calls'][0]\nresult = context[2]\n"
        "FINAL(f\"{call['name']}({call['args']}) -> {result['name']} {result['tool_call_id']} \"\n"
        "      f\"{len(result['content'])}\")"
    )
    root = ScriptedModel(by_turn(repl(code)), model_name="root")
    message = (
        ChatRLM(direct_below_tokens=None, backend=root, environment="local").bind_tools([search]).invoke(conversation())
    )
    assert message.content == "search({'query': 'cats'}) -> search c1 250006"
    first = root.calls[0][1]["content"]
    assert "It ends with 1 tool result(s) (from search) for calls made in the previous turn" in first
    assert "meow meow meow" not in first and sum(len(m["content"]) for m in root.calls[0]) < 12_000


def step_root(messages: list[Message]) -> str:
    """A root model across an agent's steps in one thread's REPL."""
    question = messages[1]["content"]
    if "tool result(s)" not in question:
        return repl("topic = context.split()[-1]\ncall_tool('search', query=topic)")
    return repl(
        "before = globals().get('context_0', '')\n"
        "FINAL(f\"{globals().get('topic')}: {len(context)} new, {before!r} before, {context[-1]['content'][:10]}\")"
    )


def test_a_thread_hands_each_step_only_its_new_messages() -> None:
    llm = chat(step_root, persistent_threads=True)
    bound = llm.bind_tools([search])
    config = {"configurable": {"thread_id": "agent"}}
    try:
        history: list[BaseMessage] = [HumanMessage("tell me about herons")]
        first = bound.invoke(history, config)
        assert [c["args"] for c in first.tool_calls] == [{"query": "herons"}]
        history += [first, ToolMessage("herons wade", tool_call_id=first.tool_calls[0]["id"], name="search")]
        second = bound.invoke(history, config)
        # `topic` is the first step's variable; the step's context is its 2 new messages, context_0 the first.
        assert second.content == "herons: 2 new, 'tell me about herons' before, herons wad"
        assert second.tool_calls == []
        # Another thread's REPL has seen nothing: the whole conversation is its context.
        other = bound.invoke(history, {"configurable": {"thread_id": "other"}})
        assert other.content == "None: 3 new, '' before, herons wad"
    finally:
        llm.close()
