"""`RLMFunctionCallingLLM`: an RLM as LlamaIndex's function-calling LLM, driving a real `FunctionAgent`."""

from __future__ import annotations

from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentStream, FunctionAgent, ToolCallResult
from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock
from llama_index.core.llms import MockLLM
from llama_index.core.tools import FunctionTool

from rlm_adapters import RLM, Message, ScriptedModel
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.llama_index import RLMFunctionCallingLLM


def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def ledger(account: str) -> str:
    """The full ledger of an account (long)."""
    lines = [f"entry {n}: {account} moved 0 coins" for n in range(60_000)]
    lines.insert(41_234, f"entry X: {account} closing balance 9,876 coins")
    return "\n".join(lines)


def repl(code: str) -> str:
    return f"```repl\n{code}\n```"


def agent_root(messages: list[Message]) -> str:
    """The RLM's root: call the tool the question needs, then answer from its result read in the REPL."""
    question = messages[1]["content"]
    if "tool result(s)" not in question:
        if "ledger" in question:
            return repl("call_tool('ledger', account='acme')")
        return 'CALL_TOOL multiply {"a": 6, "b": 7}'
    return repl(
        "import re\nresult = context[-1]['content']\nfound = re.search(r'closing balance ([\\d,]+)', result)\n"
        "FINAL('The answer is ' + (found.group(1) if found else result))"
    )


def make_llm(root: ScriptedModel, **options: Any) -> RLMFunctionCallingLLM:
    return RLMFunctionCallingLLM(backend=root, environment="local", **options)


async def test_a_function_agent_runs_a_tool_to_completion() -> None:
    root = ScriptedModel(agent_root, model_name="root")
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(multiply)], llm=make_llm(root), system_prompt="Be exact.")
    handler = agent.run("What is 6 times 7?")
    events = [event async for event in handler.stream_events()]
    response = await handler
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert [(r.tool_name, r.tool_kwargs, r.tool_output.content) for r in results] == [
        ("multiply", {"a": 6, "b": 7}, "42")
    ]
    assert str(response) == "The answer is 42"
    assert any(isinstance(e, AgentStream) and e.tool_calls for e in events)  # streamed, calls in the last chunk
    assert len(root.calls) == 2
    assert "Instructions from the user:\nBe exact." in root.calls[0][0]["content"]
    system = root.calls[0][0]["content"]
    assert "- `multiply`: multiply(a: " in system and "Multiply two integers. Arguments (JSON schema): " in system


async def test_a_long_tool_result_is_read_in_the_repl_not_the_prompt() -> None:
    root = ScriptedModel(agent_root, model_name="root")
    history = [ChatMessage(role=MessageRole.USER, content=f"note {n}: " + "nothing new " * 80) for n in range(2_000)]
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(ledger)], llm=make_llm(root), streaming=False)
    response = await agent.run("What is the closing balance in the ledger of acme?", chat_history=history)
    assert str(response) == "The answer is 9,876"
    assert len(ledger("acme")) > 1_800_000
    for call in root.calls:  # 2 MB of history and a 1.8 MB tool result, and small prompts
        assert sum(estimate_tokens(m["content"]) for m in call) < 3_000
        assert "moved 0 coins" not in "".join(m["content"] for m in call)


def test_chat_with_tools_and_the_calls_it_returns() -> None:
    root = ScriptedModel(
        [repl("call_tool('multiply', a=2, b=3)\ncall_tool('multiply', {'a': 'x'})")] * 2
        + [repl("call_tool('multiply', a=2, b=3)")]
    )
    llm = make_llm(root)
    tool = FunctionTool.from_defaults(multiply)
    response = llm.chat_with_tools([tool], user_msg="2 times 3?", tool_required=True)
    (call,) = llm.get_tool_calls_from_response(response)
    assert (call.tool_name, call.tool_kwargs) == ("multiply", {"a": 2, "b": 3})
    assert "args['a']: 'x' is not of type 'integer'" in root.calls[1][-1]["content"]
    assert "This turn must end with at least one tool call" in root.calls[0][0]["content"]
    assert response.raw is not None and response.raw["finish_reason"] == "tool_calls"
    assert response.additional_kwargs["total_tokens"] > 0


def test_plain_chat_and_completion_answer_as_text() -> None:
    llm = make_llm(ScriptedModel([repl("FINAL('plain words here')")]))
    response = llm.chat([ChatMessage(role=MessageRole.USER, content="hi")])
    assert response.message.content == "plain words here"
    with pytest.raises(ValueError, match="without a tool call"):
        llm.get_tool_calls_from_response(response)
    assert llm.get_tool_calls_from_response(response, error_on_no_tool_call=False) == []
    assert llm.complete("hi").text == "plain words here"
    assert "".join(c.delta or "" for c in llm.stream_complete("hi")) == "plain words here"
    chunks = list(llm.stream_chat([ChatMessage(role=MessageRole.USER, content="hi")]))
    assert chunks[-1].message.content == "plain words here" and len(chunks) == 3
    assert llm.metadata.is_function_calling_model and llm.metadata.model_name == "scripted"


def test_a_conversation_with_tool_calls_becomes_entries_of_the_context() -> None:
    code = "FINAL(repr([(e['role'], e.get('tool_calls'), e.get('tool_call_id')) for e in context]))"
    llm = make_llm(ScriptedModel([repl(code)]))
    messages = [
        ChatMessage(role=MessageRole.USER, content="6 times 7?"),
        ChatMessage(
            role=MessageRole.ASSISTANT,
            blocks=[ToolCallBlock(tool_call_id="c1", tool_name="multiply", tool_kwargs='{"a": 6, "b": 7}')],
        ),
        ChatMessage(role=MessageRole.TOOL, blocks=[TextBlock(text="42")], additional_kwargs={"tool_call_id": "c1"}),
    ]
    answer = llm.chat(messages).message.content
    assert answer == (
        "[('user', None, None), ('assistant', [{'id': 'c1', 'name': 'multiply', 'args': {'a': 6, 'b': 7}}], None), "
        "('tool', None, 'c1')]"
    )


def test_bad_options_are_refused() -> None:
    with pytest.raises(ValueError, match="either rlm= or the RLM's options"):
        RLMFunctionCallingLLM(rlm=RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local"), environment="local")
    with pytest.raises(ValueError, match="either llm= or backend="):
        RLMFunctionCallingLLM(llm=MockLLM(), backend=ScriptedModel(["FINAL(x)"]))
    llm = make_llm(ScriptedModel([repl("FINAL('x')")]))
    with pytest.raises(ValueError, match=r"unsupported arguments \['temperature'\]"):
        llm.chat([ChatMessage(role=MessageRole.USER, content="hi")], temperature=0)
