"""Cited sources reach LangChain users: ChatRLM's response_metadata["sources"] and RLMTool's artifact."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage

from rlm_adapters import ScriptedModel
from rlm_adapters.langchain import ChatRLM, RLMTool
from tests import planted
from tests.held_sources import held_claims

LOG = "\n".join(
    [f"2024-05-0{d} 10:00:00 INFO request served in {d * 3} ms by worker {d}" for d in range(1, 8)]
    + ["2024-05-08 10:00:00 ERROR disk quota exceeded on volume data-7 while writing the nightly export"]
    + [f"2024-05-09 10:00:0{d} INFO request served in {d} ms by worker {d}" for d in range(1, 6)]
)
GREP = "```repl\nhits = [l for l in context.splitlines() if 'ERROR' in l]\nprint(hits)\n```"
ANSWER = "```repl\nanswer = 'The error: ' + hits[0].split('ERROR ')[1]\nFINAL_VAR('answer')\n```"


def _chat() -> ChatRLM:
    return ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel([GREP, ANSWER], model_name="root"), environment="local"
    )


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
            "char_start": None,  # a short line is cited by its number alone
            "char_end": None,
        }
    ]


async def test_chat_rlm_streaming_carries_the_sources_on_the_last_chunk() -> None:
    chunks = [chunk async for chunk in _chat().astream(LOG)]
    assert chunks[-1].response_metadata["sources"][0]["line_start"] == 8


def test_rlm_tool_artifact_cites_the_planted_lines(tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    llm = ChatRLM(
        direct_below_tokens=None,
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


# A line no code prints and no preview shows (the preview is the first 400 characters): read by no model.
UNREAD_LOG = (
    LOG
    + "\n"
    + "\n".join(
        [f"2024-05-10 10:00:0{d} INFO request served in {d} ms by worker {d}" for d in range(1, 6)]
        + ["2024-05-11 09:00:00 INFO the backup vault number is 31-77-4096"]
    )
)
FABRICATED = (
    "```repl\nanswer = 'The error: ' + hits[0].split('ERROR ')[1] + '. The vault number is 31-77-4096 and '"
    " + '8,312 rotations were logged.'\nFINAL_VAR('answer')\n```"
)


def _flagged(claims: list[dict[str, object]]) -> dict[str, object]:
    return {str(c["text"]): c["reason"] for c in claims if c["status"] == "unsupported"}


def test_chat_rlm_response_metadata_flags_a_made_up_number_and_one_no_model_read() -> None:
    chat = ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel([GREP, FABRICATED], model_name="root"), environment="local"
    )
    message = chat.invoke(UNREAD_LOG)
    claims = message.response_metadata["claims"]
    supported = {c["text"]: c for c in claims if c["status"] == "supported"}
    assert supported["data-7"]["source"]["line_start"] == 8
    flagged = _flagged(claims)
    assert flagged["8,312"] == "in no text that reached a model"
    assert flagged["31-77-4096"] == "in the input (context:19) but in no text that reached a model"


def test_structured_output_keeps_the_sources_and_claims_on_the_raw_message() -> None:
    value = "```repl\nanswer = {'error': hits[0].split('ERROR ')[1], 'count': 8312}\nFINAL_VAR('answer')\n```"
    chat = ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel([GREP, value], model_name="root"), environment="local"
    )
    schema = {
        "title": "Error",
        "type": "object",
        "properties": {"error": {"type": "string"}, "count": {"type": "integer"}},
    }
    out = chat.with_structured_output(schema, include_raw=True).invoke(LOG)
    assert out["parsed"] == {
        "error": "disk quota exceeded on volume data-7 while writing the nightly export",
        "count": 8312,
    }
    metadata = out["raw"].response_metadata
    assert [s["line_start"] for s in metadata["sources"]] == [8]
    assert _flagged(metadata["claims"]) == {"8312": "in no text that reached a model"}
    assert {c["text"] for c in metadata["claims"] if c["status"] == "supported"} >= {"data-7"}


def test_each_call_of_a_persistent_thread_cites_its_own_context() -> None:
    answer = "```repl\nFINAL(hits[0])\n```"  # a cell's output reaches the model only when the run goes on
    chat = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel([GREP, answer, GREP, answer], model_name="root"),
        environment="local",
        persistent_threads=True,
    )
    config = {"configurable": {"thread_id": "t1"}}
    try:
        first = chat.invoke(LOG, config)
        second_log = "\n".join(["INFO all good here", "2024-06-02 ERROR fan 3 stopped on rack B-12"])
        second = chat.invoke(second_log, config)
    finally:
        chat.close()
    assert [s["line_start"] for s in first.response_metadata["sources"]] == [8]
    assert [(s["line_start"], s["excerpt"]) for s in second.response_metadata["sources"]] == [
        (2, "2024-06-02 ERROR fan 3 stopped on rack B-12")
    ]


def test_rlm_tool_flags_the_claims_in_its_text_and_artifact(tmp_path: Path) -> None:
    planted.make_tree(tmp_path)
    llm = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(planted.root(fabricated=True), model_name="root"),
        other_backends=[ScriptedModel(["yes"], model_name="leaf")],
        environment="local",
    )
    call = {"name": "rlm_query", "args": {"query": "passwords?", "paths": ["src"]}, "id": "c2", "type": "tool_call"}
    message = RLMTool(llm=llm, roots=[tmp_path]).invoke(call)
    assert isinstance(message, ToolMessage)
    planted.check_flags(message.artifact["claims"])
    unsupported = str(message.content).splitlines()[-1]
    assert unsupported.startswith("Unsupported: ") and f'"{planted.FABRICATED_NUMBER}"' in unsupported


def test_chat_rlm_returns_the_answer_with_the_sources_finished_within_its_sources_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 47: the claim checks, on by default, held the answer back (12.5-14.6 s over 5 MB, the last model
    request at +1.8 s). `sources_timeout` bounds them: cut, the message keeps the sources found and says why."""
    chat = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel([GREP, ANSWER], model_name="root"),
        environment="local",
        sources_timeout=0.3,
    )
    assert chat.sources_timeout == 0.3
    with held_claims(monkeypatch):
        message = chat.invoke(LOG)
    assert message.content == "The error: disk quota exceeded on volume data-7 while writing the nightly export"
    metadata = message.response_metadata
    assert [source["line_start"] for source in metadata["sources"]] == [8] and metadata["claims"] == []
    assert metadata["sources_note"] == (
        "sources not finished, cut at 0.3 s (sources_timeout): the claims were not checked"
    )
