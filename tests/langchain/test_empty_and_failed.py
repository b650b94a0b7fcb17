"""Issue 51: ChatRLM and RLMTool say what is wrong with empty input before any model call, and a failed run
raises the engine's own `RLMRunFailed` (the class `RLM` raises) with the result on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import ToolException

from rlm_adapters.errors import ContextError, RLMError, RLMRunFailed
from rlm_adapters.langchain import ChatRLM, RLMTool
from rlm_adapters.testing import FakeOpenAIServer


def test_a_failed_run_raises_the_engines_class_with_the_result(
    lc_server: FakeOpenAIServer, chat_options: dict[str, Any]
) -> None:
    lc_server.fail_next(404, message="The model `gpt-5-mni` does not exist")
    with pytest.raises(RLMRunFailed, match="gpt-5-mni") as caught:
        ChatRLM(**{**chat_options, "model": "gpt-5-mni"}).invoke("How long is it?")
    assert isinstance(caught.value, RLMError)
    assert caught.value.result.finish_reason == "error" and caught.value.result.response == ""


@pytest.mark.parametrize(
    "messages",
    ["", "  \n", [HumanMessage("the report's text"), AIMessage("Read it."), HumanMessage(" ")]],
    ids=["empty", "whitespace", "empty-last-turn"],
)
def test_an_empty_last_human_message_is_refused_before_a_model_call(
    lc_server: FakeOpenAIServer, chat_options: dict[str, Any], messages: Any
) -> None:
    with pytest.raises(ContextError) as caught:
        ChatRLM(**chat_options).invoke(messages)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("the last human message (role 'user') is empty")
    assert "give it the question" in message
    assert lc_server.counters.requests == 0


def test_the_tool_refuses_an_empty_file_and_empty_text(
    lc_server: FakeOpenAIServer, chat_options: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "zero.txt").write_bytes(b"")
    tool = RLMTool(llm=ChatRLM(**chat_options), roots=[tmp_path])
    with pytest.raises(ToolException, match=r"^the file 'zero.txt' is empty: give paths a file with text in it"):
        tool._run("What is in it?", paths=[str(tmp_path / "zero.txt")])
    with pytest.raises(ToolException, match=r"^text is empty \(2 characters of whitespace\)"):
        tool._run("What is in it?", text="  ")
    assert lc_server.counters.requests == 0
