"""`RLMQueryEngine` inside LlamaIndex's composite engines (issue 17, item 8): picked by a
`RouterQueryEngine`, and answering the sub-questions of a `SubQuestionQueryEngine`.

The routing and planning LLM is a small `CustomLLM` whose replies are a function of the prompt (it reads
the numbered choices or the tool names LlamaIndex put there, as a real model would); the engines behind
the tools are real RLM runs in the local sandbox with scripted root and sub models.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from llama_index.core import Document
from llama_index.core.llms import CompletionResponse, CompletionResponseGen, CustomLLM, LLMMetadata
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.query_engine import RouterQueryEngine, SubQuestionQueryEngine
from llama_index.core.question_gen import LLMQuestionGenerator
from llama_index.core.response_synthesizers import get_response_synthesizer
from llama_index.core.selectors import LLMSingleSelector
from llama_index.core.tools import QueryEngineTool
from pydantic import Field

from rlm_adapters import ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.llama_index import RLMQueryEngine
from rlm_adapters.testing import turn_of

LOGS = [
    Document(text="03:11 payments-db ERROR disk full (incident 4471)", id_="night.log"),
    Document(text="04:00 api-gateway ok\n04:01 search ok", id_="morning.log"),
]
NOTES = [
    Document(text="Meeting 12 May: we decided to drop the beta programme.", id_="may.md"),
    Document(text="Meeting 19 May: hiring plan, no decisions.", id_="may19.md"),
]


class FunctionLLM(CustomLLM):
    """A LlamaIndex LLM whose completion is `reply(prompt)`: pydantic-ai's FunctionModel, for LlamaIndex."""

    reply: Callable[[str], str]
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="function-llm")

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.reply(prompt))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self.complete(prompt, formatted, **kwargs)


def question_of(messages: list[Message]) -> str:
    """The question the RLM was given, as its first user message states it."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    return first.split("The question to answer:\n", 1)[1].split("\n\n", 1)[0]


def grep_root(messages: list[Message]) -> str:
    """The RLM's root: send the documents that share a word with the question to a sub-model."""
    if turn_of(messages) == 0:
        return (
            "```repl\n"
            "import re\n"
            f"words = set(re.findall(r'[a-z]{{4,}}', {question_of(messages).lower()!r}))\n"
            "hits = [d for d in context if words & set(re.findall(r'[a-z]{4,}', d['text'].lower()))]\n"
            "answer = ' / '.join(llm_query('Quote: ' + d['text']) for d in hits) or 'nothing found'\n"
            "```"
        )
    return 'FINAL_VAR("answer")'


def quote(messages: list[Message]) -> str:
    return messages[-1]["content"].removeprefix("Quote: ")


def engine(documents: list[Document]) -> RLMQueryEngine:
    return RLMQueryEngine.from_documents(
        documents,
        backend=ScriptedModel(grep_root, model_name="root"),
        other_backends=[ScriptedModel(quote, model_name="leaf")],
        environment="local",
    )


def tools() -> list[QueryEngineTool]:
    return [
        QueryEngineTool.from_defaults(engine(LOGS), name="logs", description="Service logs: errors and incidents."),
        QueryEngineTool.from_defaults(
            engine(NOTES), name="notes", description="Meeting notes: what was decided, and when."
        ),
    ]


def pick(prompt: str) -> str:
    """Choose the numbered summary that shares most words with the question."""
    question = re.search(r"question: '(.*)'", prompt, re.S)
    assert question is not None
    wanted = set(re.findall(r"[a-z]{4,}", question.group(1).lower()))
    choices = re.findall(r"\((\d+)\) (.*)", prompt)
    best = max(choices, key=lambda c: len(wanted & set(re.findall(r"[a-z]{4,}", c[1].lower()))))
    return json.dumps([{"choice": int(best[0]), "reason": "closest summary"}])


def test_a_router_sends_the_question_to_the_rlm_engine_it_picks() -> None:
    llm = FunctionLLM(reply=pick)
    router = RouterQueryEngine(selector=LLMSingleSelector.from_defaults(llm=llm), query_engine_tools=tools(), llm=llm)
    response = router.query("What was decided?")
    assert str(response) == "Meeting 12 May: we decided to drop the beta programme."
    assert response.metadata is not None and response.metadata["selector_result"].ind == 1
    assert [s.node.node_id for s in response.source_nodes] == ["may.md"]  # what the RLM read
    assert "(1) Service logs" in llm.prompts[0] and "(2) Meeting notes" in llm.prompts[0]


def plan_and_combine(prompt: str) -> str:
    """Split the question over both tools, then (asked to synthesise) join the sub-answers."""
    if "<Tools>" in prompt or "sub_question" in prompt:
        items = [
            {"sub_question": "Which incident caused an error?", "tool_name": "logs"},
            {"sub_question": "What was decided?", "tool_name": "notes"},
        ]
        return "```json\n" + json.dumps({"items": items}) + "\n```"
    return " AND ".join(sorted(re.findall(r"Response: (.*)", prompt)))


async def test_sub_questions_are_answered_by_the_rlm_engines_async() -> None:
    llm = FunctionLLM(reply=plan_and_combine)
    engine = SubQuestionQueryEngine.from_defaults(
        query_engine_tools=tools(),
        llm=llm,
        question_gen=LLMQuestionGenerator.from_defaults(llm=llm),
        response_synthesizer=get_response_synthesizer(llm=llm, response_mode="compact"),
        use_async=True,
        verbose=False,
    )
    response = await engine.aquery("What went wrong overnight, and what did the meeting decide?")
    assert str(response) == (
        "03:11 payments-db ERROR disk full (incident 4471) AND Meeting 12 May: we decided to drop the beta programme."
    )
    questions = [p for p in llm.prompts if "Sub question:" in p]
    assert len(questions) == 1 and "Which incident caused an error?" in questions[0]
    # The sources are each sub-question's answer, plus the documents the RLM runs actually read.
    sub_answers = sorted(
        n.node.get_content().splitlines()[0]
        for n in response.source_nodes
        if n.node.node_id not in ("night.log", "may.md")
    )
    assert sub_answers == ["Sub question: What was decided?", "Sub question: Which incident caused an error?"]
    assert sorted(n.node.node_id for n in response.source_nodes if n.node.node_id in ("night.log", "may.md")) == [
        "may.md",
        "night.log",
    ]
    assert len(response.source_nodes) == 4
