"""The engine as a QueryEngineTool in a LlamaIndex agent, and what LlamaIndex instrumentation sees."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from llama_index.core import Document
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent
from llama_index.core.instrumentation.events.query import QueryEndEvent, QueryStartEvent
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler
from llama_index.core.llms import MockLLM
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import QueryEngineTool

from rlm_adapters import ScriptedModel
from rlm_adapters.llama_index import RLMEvent, RLMQueryEngine

DOCS = [
    Document(
        text="Release 4.2 shipped the new cache tier on 3 June; rollbacks are handled by the ops team.",
        id_="r42",
    ),
    Document(text="Release 4.3 is planned for September and focuses on search relevance improvements.", id_="r43"),
]
ROOT = [
    """```repl
notes = [d for d in context if "cache" in d["text"]]
answer = llm_query("When did the cache ship? " + notes[0]["text"])
print(answer)
```""",
    'FINAL_VAR("answer")',
]


def _engine(**options: Any) -> RLMQueryEngine:
    return RLMQueryEngine.from_documents(
        DOCS,
        backend=ScriptedModel(ROOT, model_name="root"),
        other_backends=[ScriptedModel(["3 June"], model_name="leaf")],
        environment="local",
        **options,
    )


class Collect(BaseEventHandler):
    """Keeps every instrumentation event."""

    events: list[BaseEvent]

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.events.append(event)


@pytest.fixture
def spans() -> Iterator[SimpleSpanHandler]:
    handler = SimpleSpanHandler()
    root = get_dispatcher()
    root.add_span_handler(handler)
    try:
        yield handler
    finally:
        root.span_handlers.remove(handler)


@pytest.fixture
def collected() -> Iterator[list[BaseEvent]]:
    handler = Collect(events=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        yield handler.events
    finally:
        root.event_handlers.remove(handler)


# llama-index's workflow machinery inspects pydantic models and trips their deprecation warnings.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_the_engine_answers_as_a_tool_of_a_function_agent() -> None:
    engine = _engine()
    tool = QueryEngineTool.from_defaults(engine, name="release_notes", description="Answers about release notes.")
    seen_tool_output: list[str] = []

    def agent_llm(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        results = [m for m in messages if m.role == MessageRole.TOOL]
        if not results:
            call = ToolCallBlock(tool_call_id="call-1", tool_name="release_notes", tool_kwargs={"input": "When?"})
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        seen_tool_output.append(str(results[-1].content))
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"The cache shipped on {results[-1].content}.")

    agent = FunctionAgent(tools=[tool], llm=MockFunctionCallingLLM(response_generator=agent_llm))
    result = await agent.run(user_msg="When did the cache ship?")
    assert seen_tool_output == ["3 June"]
    assert str(result) == "The cache shipped on 3 June."
    assert result.tool_calls[0].tool_name == "release_notes"
    raw = result.tool_calls[0].tool_output.raw_output
    assert [n.node.node_id for n in raw.source_nodes] == ["r42"]


def test_instrumentation_sees_the_query_span_and_every_run_step(
    collected: list[BaseEvent], spans: SimpleSpanHandler
) -> None:
    response = _engine().query("When did the cache ship?")
    assert response.response == "3 June"
    kinds = [e.rlm_kind for e in collected if isinstance(e, RLMEvent)]
    assert kinds == [
        "run_start",
        "root_call",
        "sub_call_start",
        "sub_call_end",
        "cell",
        "root_call",
        "cell",
        "final",
    ]
    start = next(e for e in collected if isinstance(e, QueryStartEvent))
    assert any(isinstance(e, QueryEndEvent) for e in collected)
    rlm_events = [e for e in collected if isinstance(e, RLMEvent)]
    # They happen inside the engine's run span, itself inside the query span.
    assert all(e.span_id and e.span_id.startswith("RLMQueryEngine.arun") for e in rlm_events)
    assert start.span_id and start.span_id.startswith("RLMQueryEngine.query")
    parents = {span.id_: span.parent_id for span in spans.completed_spans}
    chain = [rlm_events[0].span_id]
    while parents.get(chain[-1]):
        chain.append(parents[chain[-1]])
    assert start.span_id in chain[1:]
    sub = next(e for e in rlm_events if e.rlm_kind == "sub_call_start")
    assert sub.data["prompt"].startswith("When did the cache ship? Release 4.2")
    final = rlm_events[-1]
    assert final.data["finish_reason"] == "final" and final.depth == 0


def test_llm_events_of_a_llama_index_sub_model_are_in_the_run(collected: list[BaseEvent]) -> None:
    engine = RLMQueryEngine.from_documents(
        DOCS, backend=ScriptedModel(ROOT, model_name="root"), sub_llm=MockLLM(), environment="local"
    )
    engine.query("When did the cache ship?")
    chats = [e for e in collected if isinstance(e, LLMChatStartEvent)]
    # MockLLM's achat and the chat it delegates to each report a start.
    assert chats and all("When did the cache ship?" in str(c.messages[0].content) for c in chats)
