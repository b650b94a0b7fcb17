"""`ChatRLM` as an agent's own model (issue 28): `create_agent` and a LangGraph `ToolNode` loop, each with a
checkpointer, over a 5 MB conversation history and a tool whose output is 2 MB.

The agent calls the tool, the RLM reads its result through the REPL and answers. The history and the tool
output live in the thread's REPL (each step hands it only its new messages); the root model's prompts stay
a few thousand tokens at every step, which is what the RLM is for.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from rlm_adapters import Message, ScriptedModel
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.langchain import ChatRLM

agents = pytest.importorskip("langchain.agents", reason="needs langchain (pip install -e '.[dev]', langchain>=1.0)")
graph = pytest.importorskip("langgraph.graph", reason="needs langgraph (pip install -e '.[dev]', langgraph>=1.0)")
prebuilt = pytest.importorskip("langgraph.prebuilt", reason="needs langgraph (pip install langgraph)")
memory = pytest.importorskip("langgraph.checkpoint.memory", reason="needs langgraph (pip install langgraph)")

HISTORY_CHARS = 5_000_000
TOOL_OUTPUT_CHARS = 2_000_000
PROMPT_TOKEN_CEILING = 3_000
FILLER = [
    "We went over the quarterly numbers again and nothing changed since the last review of the plan.",
    "The staging cluster was restarted twice; the flaky test in the billing suite is still flaky today.",
    "Someone asked whether the old dashboard can be retired, and the answer is still not this quarter.",
]


def long_history() -> list[BaseMessage]:
    """About 5 MB of an earlier conversation, with one fact worth remembering a third of the way in."""
    lines = itertools.cycle(FILLER)
    messages: list[BaseMessage] = []
    total = 0
    for turn in itertools.count():
        text = f"[turn {turn}] " + " ".join(next(lines) for _ in range(10))
        messages.append(HumanMessage(text) if turn % 2 == 0 else AIMessage(text))
        total += len(text)
        if total >= HISTORY_CHARS:
            break
    messages.insert(len(messages) // 3, HumanMessage("For the record: the project's code name is KESTREL."))
    return messages


@tool
def release_notes(project: str) -> str:
    """The full release notes of a project (very long)."""
    filler = "".join(f"build {n}: routine maintenance, nothing notable\n" for n in range(TOOL_OUTPUT_CHARS // 48))
    cut = len(filler) * 3 // 5
    return f"{filler[:cut]}{project} shipped version 7.3.1 with the new importer\n{filler[cut:]}"


def agent_root(messages: list[Message]) -> str:
    """The RLM's root model across the agent's two steps (one REPL: `name` survives from the first)."""
    if "tool result(s)" not in messages[1]["content"]:
        return (
            "```repl\nimport re\n"
            "names = [m.group(1) for t in context for m in [re.search(r'code name is (\\w+)', t['content'])] if m]\n"
            "print(len(context), names)\nname = names[-1]\n"
            "call_tool('release_notes', project=name)\n```"
        )
    return (
        "```repl\nimport re\nnotes = context[-1]['content']\n"
        "found = re.search(name + r' shipped version ([\\d.]+)', notes)\n"
        "FINAL(f'{name} is at version {found.group(1)} ({len(notes):,} characters of notes, '\n"
        "      f'{len(context)} new messages)')\n```"
    )


def assert_small_prompts(root: ScriptedModel) -> None:
    """Every root call stayed a few thousand tokens, and none of them carried the bulk of the data."""
    assert root.calls, "the root model was never called"
    for call in root.calls:
        text = "\n".join(m["content"] for m in call)
        assert sum(estimate_tokens(m["content"]) for m in call) < PROMPT_TOKEN_CEILING
        assert "routine maintenance, nothing notable" not in text
        outside_preview = re.sub(r"<preview>.*?</preview>", "", text, flags=re.DOTALL)
        assert "flaky test in the billing suite" not in outside_preview


def check_answer(messages: list[BaseMessage], root: ScriptedModel) -> None:
    ai_call, result, answer = messages[-3:]
    assert isinstance(ai_call, AIMessage) and [c["name"] for c in ai_call.tool_calls] == ["release_notes"]
    assert ai_call.tool_calls[0]["args"] == {"project": "KESTREL"}
    assert isinstance(result, ToolMessage) and len(str(result.content)) > TOOL_OUTPUT_CHARS
    assert isinstance(answer, AIMessage) and answer.tool_calls == []
    notes = len(str(result.content))
    assert answer.content == f"KESTREL is at version 7.3.1 ({notes:,} characters of notes, 2 new messages)"
    assert len(root.calls) == 2  # one root call per agent step
    # The second step's context was only its two new messages (the first step's REPL kept the history).
    assert "in 2 items" in root.calls[1][1]["content"]
    assert_small_prompts(root)


def test_create_agent_over_a_long_history_and_a_long_tool_output() -> None:
    root = ScriptedModel(agent_root, model_name="root")
    llm = ChatRLM(direct_below_tokens=None, backend=root, environment="local", persistent_threads=True)
    try:
        agent = agents.create_agent(llm, tools=[release_notes], checkpointer=memory.InMemorySaver())
        question = HumanMessage("What version did the project whose code name I told you ship last?")
        state = agent.invoke({"messages": [*long_history(), question]}, {"configurable": {"thread_id": "ops"}})
        check_answer(state["messages"], root)
    finally:
        llm.close()


def test_a_tool_node_loop_with_a_checkpointer_in_the_subprocess_sandbox() -> None:
    root = ScriptedModel(agent_root, model_name="root")
    llm = ChatRLM(direct_below_tokens=None, backend=root, environment="subprocess", persistent_threads=True)
    model = llm.bind_tools([release_notes])

    def call_model(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = graph.StateGraph(graph.MessagesState)
    builder.add_node("agent", call_model)
    builder.add_node("tools", prebuilt.ToolNode([release_notes]))
    builder.add_edge(graph.START, "agent")
    builder.add_conditional_edges("agent", prebuilt.tools_condition)
    builder.add_edge("tools", "agent")
    app = builder.compile(checkpointer=memory.MemorySaver())
    try:
        question = HumanMessage("Which version did the project whose code name I gave you ship?")
        state = app.invoke({"messages": [*long_history(), question]}, {"configurable": {"thread_id": "loop"}})
        check_answer(state["messages"], root)
    finally:
        llm.close()
