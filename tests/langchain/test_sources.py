"""Cited sources reach LangChain users: ChatRLM's response_metadata["sources"] and RLMTool's artifact."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import ToolMessage

from rlm_adapters import ScriptedModel
from rlm_adapters.langchain import ChatRLM, RLMTool
from tests import planted

LOG = "\n".join(
    [f"2024-05-0{d} 10:00:00 INFO request served in {d * 3} ms by worker {d}" for d in range(1, 8)]
    + ["2024-05-08 10:00:00 ERROR disk quota exceeded on volume data-7 while writing the nightly export"]
    + [f"2024-05-09 10:00:0{d} INFO request served in {d} ms by worker {d}" for d in range(1, 6)]
)
GREP = "```repl\nhits = [l for l in context.splitlines() if 'ERROR' in l]\nprint(hits)\n```"
ANSWER = "```repl\nanswer = 'The error: ' + hits[0].split('ERROR ')[1]\nFINAL_VAR('answer')\n```"


def _chat() -> ChatRLM:
    return ChatRLM(backend=ScriptedModel([GREP, ANSWER], model_name="root"), environment="local")


def test_chat_rlm_response_metadata_names_the_line_of_the_message() -> None:
    message = _chat().invoke(LOG)
    assert message.content == "The error: disk quota exceeded on volume data-7 while writing the nightly export"
    assert message.response_metadata["sources"] == [
        {
            "path": "context",
            "line_start": 8,
            "line_end": 8,
            "chars": len(LOG.splitlines()[7]),
            "excerpt": LOG.splitlines()[7],
            "place": None,
        }
    ]


async def test_chat_rlm_streaming_carries_the_sources_on_the_last_chunk() -> None:
    chunks = [chunk async for chunk in _chat().astream(LOG)]
    assert chunks[-1].response_metadata["sources"][0]["line_start"] == 8


def test_rlm_tool_artifact_cites_the_planted_lines(tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    llm = ChatRLM(
        backend=ScriptedModel(planted.root(), model_name="root"),
        other_backends=[ScriptedModel(["yes"], model_name="leaf")],
        environment="local",
    )
    tool = RLMTool(llm=llm, roots=[tmp_path])
    call = {
        "name": "rlm_query",
        "args": {"query": "rollout passwords?", "paths": ["src"]},
        "id": "c1",
        "type": "tool_call",
    }
    message = tool.invoke(call)
    assert isinstance(message, ToolMessage)
    assert str(message.content).startswith(planted.ANSWER_TEXT + "\n\nSources:\n- src/")
    cited = {(s["path"], s["line_start"], s["line_end"]) for s in message.artifact["sources"]}
    assert cited == planted.expected()
