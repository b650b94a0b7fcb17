"""RLMTool: an agent hands files or text to an RLM; paths stay under the roots given at construction."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import ValidationError

from rlm_adapters import ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.langchain import ChatRLM, RLMTool
from rlm_adapters.testing import turn_of

# The answer, the line it rests on (line 501 of b.log) and the file count the root's code computed and never
# showed a model, which the claims check flags.
ANSWER_777 = '777 from 2 files\n\nSources:\n- logs/b.log:501\nUnsupported: "2" (in no text that reached a model)'


def read_documents(messages: list[Message]) -> str:
    """A root model that sends every document to a sub-model and returns what they found."""
    if turn_of(messages) == 0:  # type: ignore[arg-type]
        return (
            "```repl\nanswers = llm_query_batched(['magic number? ' + d['text'] for d in context])\n"
            "found = ','.join(a for a in answers if a != 'NONE')\n"
            "answer = found + ' from ' + str(len(context)) + ' files'\n```"
        )
    return 'FINAL_VAR("answer")'


def find_number(messages: list[Message]) -> str:
    found = re.search(r"magic number is (\d+)", messages[-1]["content"])
    return found.group(1) if found else "NONE"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_text("all quiet\n" * 1000)
    (tmp_path / "logs" / "b.log").write_text("noise\n" * 500 + "the magic number is 777\n")
    (tmp_path / "notes.txt").write_text("not a log")
    (tmp_path.parent / "secret.txt").write_text("the magic number is 999")
    return tmp_path


@pytest.fixture
def tool(corpus: Path) -> RLMTool:
    llm = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(read_documents, model_name="root"),
        other_backends=[ScriptedModel(find_number, model_name="leaf")],
        environment="local",
    )
    return RLMTool(llm=llm, roots=[corpus])


def run_agent(tool: RLMTool, calls: list[dict[str, Any]]) -> list[BaseMessage]:
    """A minimal agent loop: a fake tool-calling model asks for the tool, sees its result, answers."""
    agent = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    "",
                    tool_calls=[{"name": "rlm_query", "args": a, "id": f"call_{i}"} for i, a in enumerate(calls)],
                ),
                AIMessage("Done."),
            ]
        )
    )
    history: list[BaseMessage] = [HumanMessage("What is the magic number in my logs?")]
    reply = agent.invoke(history)
    while isinstance(reply, AIMessage) and reply.tool_calls:
        history.append(reply)
        history += [tool.invoke(call) for call in reply.tool_calls]
        reply = agent.invoke(history)
    return [*history, reply]


def test_agent_loop_reads_a_glob_through_the_tool(tool: RLMTool) -> None:
    history = run_agent(tool, [{"query": "What is the magic number?", "paths": ["logs/*.log"]}])
    result = history[2]
    assert isinstance(result, ToolMessage) and result.tool_call_id == "call_0" and result.status == "success"
    assert result.content == ANSWER_777
    # The artifact carries the same sources, structured: the one line the answer came from.
    assert result.artifact["sources"] == [
        {
            "path": "logs/b.log",
            "line_start": 501,
            "line_end": 501,
            "chars": 23,
            "excerpt": "the magic number is 777",
            "place": None,
            "char_start": None,
            "char_end": None,
        }
    ]
    assert result.artifact["files_read"] == ["logs/a.log", "logs/b.log"] and result.artifact["finish_reason"] == "final"
    assert history[-1].content == "Done."


def test_paths_outside_the_roots_come_back_as_a_tool_error(tool: RLMTool) -> None:
    history = run_agent(tool, [{"query": "magic number?", "paths": ["../secret.txt"]}])
    result = history[2]
    assert isinstance(result, ToolMessage) and result.status == "error"
    assert "secret.txt" in str(result.content) and "999" not in str(result.content)


def test_text_instead_of_paths(tool: RLMTool) -> None:
    shout = "```repl\nanswer = context.upper()\nFINAL_VAR('answer')\n```"
    tool.llm = ChatRLM(direct_below_tokens=None, backend=ScriptedModel([shout]), environment="local")
    assert tool.invoke({"query": "shout it", "text": "inline corpus"}) == "INLINE CORPUS"


def test_exactly_one_source(tool: RLMTool) -> None:
    with pytest.raises(ValidationError, match="either paths or text"):
        tool.invoke({"query": "q"})
    with pytest.raises(ValidationError, match="either paths or text"):
        tool.invoke({"query": "q", "paths": ["logs"], "text": "t"})


async def test_async_tool_reports_progress(tool: RLMTool) -> None:
    kinds: list[str] = []

    class Progress(AsyncCallbackHandler):
        async def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
            kinds.append(data["kind"])

    output = await tool.ainvoke({"query": "magic?", "paths": ["logs"]}, config={"callbacks": [Progress()]})
    assert output == ANSWER_777
    assert kinds[0] == "run_start" and kinds[-1] == "final" and kinds.count("sub_call_start") == 2
