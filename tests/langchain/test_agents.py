"""The adapters where LangChain users put them (issue 17, item 8): `RLMTool` in `create_agent`'s loop,
and `ChatRLM` as a LangGraph node whose conversation a checkpointer keeps between turns.

The agent's own model is a fake tool-calling chat model (LangChain's `GenericFakeChatModel` replaying
`AIMessage`s with `tool_calls`, the shape every provider's model returns); the RLM behind the tool and the
node is a real run in the local sandbox with scripted root and sub models.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from rlm_adapters import ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.langchain import ChatRLM, RLMTool
from rlm_adapters.testing import turn_of
from tests.langchain.test_tool import ANSWER_777

agents = pytest.importorskip("langchain.agents", reason="needs langchain (pip install -e '.[dev]', langchain>=1.0)")
graph = pytest.importorskip("langgraph.graph", reason="needs langgraph (pip install -e '.[dev]', langgraph>=1.0)")
memory = pytest.importorskip("langgraph.checkpoint.memory", reason="needs langgraph (pip install langgraph)")


class ToolCallingFake(GenericFakeChatModel):
    """A fake chat model that accepts tools, as `create_agent` requires, and replays its messages."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ToolCallingFake:  # type: ignore[override]
        return self


def read_documents(messages: list[Message]) -> str:
    """The RLM's root: every document to a sub-model, then the answer."""
    if turn_of(messages) == 0:  # type: ignore[arg-type]
        return (
            "```repl\nanswers = llm_query_batched(['magic number? ' + d['text'] for d in context])\n"
            "answer = ','.join(a for a in answers if a != 'NONE') + ' from ' + str(len(context)) + ' files'\n```"
        )
    return 'FINAL_VAR("answer")'


def find_number(messages: list[Message]) -> str:
    found = re.search(r"magic number is (\d+)", messages[-1]["content"])
    return found.group(1) if found else "NONE"


@pytest.fixture
def tool(tmp_path: Path) -> RLMTool:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("all quiet\n" * 1000)
    (tmp_path / "logs" / "b.log").write_text("noise\n" * 500 + "the magic number is 777\n")
    llm = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(read_documents, model_name="root"),
        other_backends=[ScriptedModel(find_number, model_name="leaf")],
        environment="local",
    )
    return RLMTool(llm=llm, roots=[tmp_path])


def call(args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": "rlm_query", "args": args, "id": call_id, "type": "tool_call"}])


def test_create_agent_calls_the_tool_and_answers_from_its_result(tool: RLMTool, tmp_path: Path) -> None:
    model = ToolCallingFake(
        messages=iter([call({"query": "What is the magic number?", "paths": ["logs"]}, "c1"), AIMessage("777.")])
    )
    agent = agents.create_agent(model, tools=[tool], system_prompt="Use rlm_query for files.")
    result = agent.invoke({"messages": [HumanMessage("What is the magic number in the logs?")]})
    messages: list[BaseMessage] = result["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "ai"]
    reply = messages[2]
    assert isinstance(reply, ToolMessage) and reply.tool_call_id == "c1" and reply.name == "rlm_query"
    # The answer, then the line it rests on (line 501 of b.log holds the magic number); the file count was
    # computed by code (len(context)) and never shown to a model, so the claims check flags it.
    assert reply.status == "success" and reply.content == ANSWER_777
    assert messages[-1].content == "777."


def test_create_agent_sees_a_refused_path_as_a_tool_error_and_goes_on(tool: RLMTool, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("the magic number is 999")
    model = ToolCallingFake(
        messages=iter(
            [
                call({"query": "magic number?", "paths": [str(outside)]}, "c1"),
                call({"query": "magic number?", "paths": ["logs/*.log"]}, "c2"),
                AIMessage("It is 777."),
            ]
        )
    )
    agent = agents.create_agent(model, tools=[tool])
    messages = agent.invoke({"messages": [HumanMessage("Find the magic number.")]})["messages"]
    first, second = (m for m in messages if isinstance(m, ToolMessage))
    assert first.status == "error" and "outside the allowed roots" in str(first.content)
    assert "999" not in str(first.content)
    assert second.status == "success" and second.content == ANSWER_777
    assert messages[-1].content == "It is 777."


def remember_code_word(messages: list[Message]) -> str:
    """The RLM's root inside the graph: answer from the whole conversation it is given as `context`."""
    return (
        "```repl\n"
        "turns = context if isinstance(context, list) else [{'role': 'user', 'content': context}]\n"
        "said = [t['content'].split('code word is ')[1].split('.')[0]\n"
        "        for t in turns if 'code word is ' in t['content']]\n"
        "FINAL(said[-1] if len(turns) > 1 and said else 'noted')\n"
        "```"
    )


def test_chat_rlm_as_a_langgraph_node_with_a_checkpointer() -> None:
    llm = ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel(remember_code_word, model_name="root"), environment="local"
    )

    def answer(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [llm.invoke(state["messages"])]}

    builder = graph.StateGraph(graph.MessagesState)
    builder.add_node("rlm", answer)
    builder.add_edge(graph.START, "rlm")
    builder.add_edge("rlm", graph.END)
    app = builder.compile(checkpointer=memory.InMemorySaver())
    thread = {"configurable": {"thread_id": "one"}}

    first = app.invoke({"messages": [HumanMessage("The code word is heron. Remember it.")]}, thread)
    assert first["messages"][-1].content == "noted"
    second = app.invoke({"messages": [HumanMessage("What was the code word?")]}, thread)
    assert [m.type for m in second["messages"]] == ["human", "ai", "human", "ai"]
    reply = second["messages"][-1]
    assert reply.content == "heron"  # read from the turn the checkpointer kept
    assert reply.response_metadata["finish_reason"] == "final" and reply.usage_metadata is not None
    # Another thread has no history, so the same question finds nothing to read.
    other = app.invoke({"messages": [HumanMessage("What was the code word?")]}, {"configurable": {"thread_id": "two"}})
    assert other["messages"][-1].content == "noted"
    assert len(app.get_state(thread).values["messages"]) == 4


async def test_chat_rlm_node_streams_through_langgraph() -> None:
    llm = ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel(remember_code_word, model_name="root"), environment="local"
    )

    async def answer(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [await llm.ainvoke(state["messages"])]}

    builder = graph.StateGraph(graph.MessagesState)
    builder.add_node("rlm", answer)
    builder.add_edge(graph.START, "rlm")
    app = builder.compile(checkpointer=memory.InMemorySaver())
    chunks = [
        chunk
        async for chunk, _meta in app.astream(
            {"messages": [HumanMessage("The code word is ibis.")]},
            {"configurable": {"thread_id": "s"}},
            stream_mode="messages",
        )
    ]
    # Each token once: the node's final message shares the streamed chunks' id, so LangGraph drops it.
    assert "".join(str(c.content) for c in chunks) == "noted"
    assert {c.id for c in chunks} == {chunks[0].id} and str(chunks[0].id).startswith("lc_run--")
