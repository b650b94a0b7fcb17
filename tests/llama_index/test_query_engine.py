"""RLMQueryEngine over a 200-file folder: right answer, and exactly the documents it read as sources."""

from __future__ import annotations

import re
from typing import Any

import pytest
from llama_index.core import Document, SimpleDirectoryReader, SummaryIndex
from llama_index.core.base.response.schema import AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.schema import MetadataMode, TextNode

from rlm_adapters import RLMLogger, ScriptedModel
from rlm_adapters.llama_index import RLMQueryEngine
from rlm_adapters.testing import FakeOpenAIServer
from tests.held_sources import held_claims

from .corpus import FACT, FACT_CODE, FACT_FILES, QUESTION, READ_WINDOW, Corpus, leaf_policy, root_policy

ANSWER = f"The launch code for Project Halcyon is {FACT_CODE}."
# A root model's first turn: it prints the fact's line of the one document that holds it.
GREP = """```repl
doc = next(d for d in context if d["metadata"]["file_name"] == "meeting_notes_086.txt")
at = doc["text"].index("launch code for Project Halcyon")
print(doc["text"][at - 200: at + 200])
```"""


@pytest.fixture(scope="module")
def documents(corpus: Corpus) -> list[Document]:
    docs = SimpleDirectoryReader(str(corpus.folder)).load_data()
    assert len(docs) == 200 and sum(len(d.text) for d in docs) > 2_000_000
    return docs


def _names(response: Any) -> list[str]:
    return sorted(n.node.metadata["file_name"] for n in response.source_nodes)


def _check_whole_documents(response: Any, documents: list[Document]) -> None:
    by_id = {d.doc_id: d for d in documents}
    for source in response.source_nodes:
        text = by_id[source.node.node_id].text
        assert source.node.metadata["rlm_char_ranges"] == [[0, len(text)]]
        assert source.score == 1.0


@pytest.mark.parametrize("environment", ["local", "subprocess"])
async def test_answer_and_exact_sources_over_the_openai_backend(
    fake_server: FakeOpenAIServer,
    openai_options: dict[str, Any],
    documents: list[Document],
    environment: str,
    tmp_path: Any,
) -> None:
    fake_server.root = root_policy()
    fake_server.leaf = leaf_policy
    engine = RLMQueryEngine.from_documents(
        documents, environment=environment, logger=RLMLogger(str(tmp_path)), **openai_options
    )
    response = await engine.aquery(QUESTION)
    assert isinstance(response, Response)
    assert response.response == ANSWER
    assert _names(response) == sorted(FACT_FILES)
    _check_whole_documents(response, documents)
    meta = response.metadata or {}
    assert meta["finish_reason"] == "final" and meta["iterations"] == 4
    assert meta["usage"]["sub"]["calls"] == 3 == fake_server.counters.leaf_requests
    assert meta["trajectory_file"] and meta["trajectory_file"].endswith(".jsonl")
    assert [s["sub_calls"] for s in meta["sources"]] == [1, 1, 1]
    # Issue 51: named as the reader named the files, not by the documents' random ids.
    assert sorted(s["name"] for s in meta["sources"]) == sorted(FACT_FILES)
    assert {s["id"] for s in meta["sources"]} == {n.node.node_id for n in response.source_nodes}
    # The engine's caller-owned documents are untouched by the ranges put on the sources.
    assert all("rlm_char_ranges" not in d.metadata for d in documents)


def test_a_few_lines_give_their_range_only(documents: list[Document]) -> None:
    engine = RLMQueryEngine.from_documents(
        documents,
        backend=ScriptedModel(root_policy(READ_WINDOW), model_name="root"),
        other_backends=[ScriptedModel(lambda m: leaf_policy(m[-1]["content"]), model_name="leaf")],
        environment="local",
    )
    response = engine.query(QUESTION)
    assert response.response == ANSWER
    assert _names(response) == sorted(FACT_FILES)
    for source in response.source_nodes:
        text = source.node.get_content()
        [[start, end]] = source.node.metadata["rlm_char_ranges"]
        match = re.search("launch code for project halcyon", text, re.IGNORECASE)
        assert match is not None and FACT in text
        # The window was 300 characters either side of the match; the matcher trims cut words at its edges.
        assert match.start() - 300 <= start <= match.start() - 280
        assert match.end() + 280 <= end <= match.end() + 300
        assert 0 < source.score < 0.1
        # Line ranges beside the character ranges: the lines those characters lie on, counted from 1.
        first = text.count("\n", 0, start) + 1
        last = text.count("\n", 0, end - 1) + 1
        assert source.node.metadata["rlm_line_ranges"] == [[first, last]] and first <= last
        assert "rlm_line_ranges" not in source.node.get_content(metadata_mode=MetadataMode.LLM)
    lines = {s["id"]: s["lines"] for s in (response.metadata or {})["sources"]}
    assert lines == {n.node.node_id: n.node.metadata["rlm_line_ranges"] for n in response.source_nodes}


def test_printed_text_counts_and_untouched_documents_do_not(documents: list[Document]) -> None:
    show = """```repl
doc = next(d for d in context if d["metadata"]["file_name"] == "design_review_003.txt")
print(doc)
```"""
    engine = RLMQueryEngine.from_documents(
        documents[:20],
        backend=ScriptedModel([show, "FINAL(seen)"], model_name="root"),
        environment="local",
        max_output_chars=100_000,
    )
    response = engine.query("Show me design review 3.")
    # print(dict) shows a repr (escaped newlines and quotes): still matched, as a whole document.
    assert _names(response) == ["design_review_003.txt"]
    _check_whole_documents(response, documents)
    assert (response.metadata or {})["sources"][0]["printed"] == 1


def test_only_what_the_root_model_saw_of_a_long_output_counts(documents: list[Document]) -> None:
    show = """```repl
for d in context[:5]:
    print(d["text"])
```"""
    engine = RLMQueryEngine.from_documents(
        documents[:5], backend=ScriptedModel([show, "FINAL(ok)"], model_name="root"), environment="local"
    )
    response = engine.query("skim")
    # 5 x ~15 KB printed, cut to 10,000 characters (head and tail): the first and last documents only.
    names = _names(response)
    assert names == sorted([documents[0].metadata["file_name"], documents[4].metadata["file_name"]])


def test_streaming_query_yields_the_answer_then_fills_sources(documents: list[Document]) -> None:
    engine = RLMQueryEngine.from_documents(
        documents,
        backend=ScriptedModel(root_policy(), model_name="root"),
        other_backends=[ScriptedModel(lambda m: leaf_policy(m[-1]["content"]), model_name="leaf")],
        environment="local",
        streaming=True,
    )
    response = engine.query(QUESTION)
    assert isinstance(response, StreamingResponse)
    pieces = list(response.response_gen)
    assert len(pieces) > 3 and "".join(pieces) == ANSWER
    assert _names(response) == sorted(FACT_FILES)
    assert (response.metadata or {})["finish_reason"] == "final"


async def test_async_streaming(documents: list[Document]) -> None:
    engine = RLMQueryEngine.from_documents(
        documents,
        backend=ScriptedModel(root_policy(), model_name="root"),
        other_backends=[ScriptedModel(lambda m: leaf_policy(m[-1]["content"]), model_name="leaf")],
        environment="local",
        streaming=True,
    )
    response = await engine.aquery(QUESTION)
    assert isinstance(response, AsyncStreamingResponse)
    pieces = [piece async for piece in response.async_response_gen()]
    assert "".join(pieces) == ANSWER
    assert _names(response) == sorted(FACT_FILES)


def test_from_index_takes_every_node_of_the_docstore() -> None:
    nodes = [
        TextNode(text=f"Chunk {n} of the handbook: section {n} covers travel rules.", id_=f"n{n}") for n in range(5)
    ]
    index = SummaryIndex(nodes=nodes)
    read_one = '```repl\nprint(next(d for d in context if d["id"] == "n3")["text"])\n```'
    engine = RLMQueryEngine.from_index(
        index, backend=ScriptedModel([read_one, "FINAL(section 3)"]), environment="local"
    )
    assert [d["id"] for d in engine.documents] == [f"n{n}" for n in range(5)]
    response = engine.query("Which section covers travel?")
    assert response.response == "section 3"
    assert [n.node.node_id for n in response.source_nodes] == ["n3"]


def test_the_response_carries_the_cited_lines_and_the_claims_checked(documents: list[Document]) -> None:
    answer = f"```repl\nFINAL('The launch code is {FACT_CODE}; 9,731 people know it.')\n```"
    engine = RLMQueryEngine.from_documents(
        documents, backend=ScriptedModel([GREP, answer], model_name="root"), environment="local"
    )
    response = engine.query(QUESTION)
    metadata = response.metadata or {}
    claims = {c["text"]: c for c in metadata["claims"]}
    assert claims[FACT_CODE]["status"] == "supported"
    assert claims["9,731"] == {**claims["9,731"], "status": "unsupported", "reason": "in no text that reached a model"}
    [cited] = metadata["citations"]
    assert FACT in cited["excerpt"] and _names(response) == ["meeting_notes_086.txt"]
    # The engine's documents are read into one corpus, kept for every query.
    assert engine.document_index() is engine.document_index()


def test_a_query_engine_with_a_call_cache_answers_again_without_a_model_call(tmp_path: Any) -> None:
    root = ScriptedModel(["```repl\nprint(llm_query(context[0]['text'][:50]))\n```", "FINAL(from the cache)"])
    leaf = ScriptedModel(["a leaf answer"], model_name="leaf")
    docs = [Document(text="the only document " * 10, id_="only")]
    first = RLMQueryEngine.from_documents(docs, backend=root, other_backends=[leaf], environment="local",
                                          cache=tmp_path / "calls.sqlite")  # fmt: skip
    assert first.query("q").response == "from the cache"
    calls = (len(root.calls), len(leaf.calls))
    again = RLMQueryEngine.from_documents(docs, backend=root, other_backends=[leaf], environment="local",
                                          cache=tmp_path / "calls.sqlite")  # fmt: skip
    response = again.query("q")
    assert response.response == "from the cache" and (len(root.calls), len(leaf.calls)) == calls
    assert (response.metadata or {})["usage"]["total"]["cached_calls"] == 3


def test_the_response_keeps_what_its_sources_finished_within_sources_timeout(
    documents: list[Document], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 47: the sources never hold the answer past `sources_timeout`; cut, the response says what is missing."""
    answer = f"```repl\nFINAL('The launch code is {FACT_CODE}.')\n```"
    engine = RLMQueryEngine.from_documents(
        documents, backend=ScriptedModel([GREP, answer], model_name="root"), environment="local", sources_timeout=0.5
    )
    with held_claims(monkeypatch):
        response = engine.query(QUESTION)
    metadata = response.metadata or {}
    assert response.response == f"The launch code is {FACT_CODE}."
    [cited] = metadata["citations"]
    assert FACT in cited["excerpt"] and metadata["claims"] == []
    note = "sources not finished, cut at 0.5 s (sources_timeout): the claims were not checked"
    assert metadata["sources_note"] == note
    assert _names(response) == ["meeting_notes_086.txt"]  # the documents read are listed before the claims
