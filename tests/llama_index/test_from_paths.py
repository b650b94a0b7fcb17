"""RLMQueryEngine.from_paths: documents converted behind the walls, source nodes that name the page and line."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.schema import MetadataMode, NodeRelationship
from llama_index.core.tools import QueryEngineTool

from rlm_adapters import ScriptedModel
from rlm_adapters.documents import CONVERSIONS, ConversionProgress
from rlm_adapters.files import FileLoadError, PathNotAllowedError
from rlm_adapters.llama_index import RLMQueryEngine
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing._policies import scripted_root
from tests.documents import writers

CODE = "8812-BRAVO"
# The root model's code finds the planted line of page 7 by the page map the converter recorded, and asks a
# sub-model about that line alone: the page and the line are what reached a model.
READ_LINE = """```repl
report = next(d for d in context if d["metadata"]["path"] == "q3.pdf")
start, end = report["metadata"]["pages"][6]
line = next(l for l in report["text"][start:end].splitlines() if "combination" in l)
answer = llm_query("What is the vault combination? Reply with it only. " + line)
print(answer)
```"""
ROOT = [READ_LINE, 'FINAL_VAR("answer")']
PAGE_SEVEN_LINE_FOUR = {"kind": "page", "start": "7", "end": None, "line_start": 4, "line_end": 4}


def leaf(prompt: str) -> str:
    """A sub-model that reads the combination from the text it was given."""
    match = re.search(r"combination is ([0-9A-Z-]+)", prompt)
    return match.group(1) if match else "NONE"


def scripted(root: list[str], **options: Any) -> dict[str, Any]:
    """Engine options with scripted root and sub models in the local sandbox."""
    return {
        "backend": ScriptedModel(root, model_name="root"),
        "other_backends": [ScriptedModel(lambda m: leaf(m[-1]["content"]), model_name="leaf")],
        "environment": "local",
        **options,
    }


@pytest.fixture(autouse=True)
def _fresh_conversions() -> None:
    """Each test converts from nothing (the cache lives as long as the process)."""
    CONVERSIONS.clear()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """``docs/`` holding q3.pdf (page 7, line 4: the combination), a Word contract and a text note."""
    docs = tmp_path / "docs"
    docs.mkdir()
    writers.pdf(docs / "q3.pdf")
    writers.docx(docs / "contract.docx")
    (docs / "notes.txt").write_text("Meeting notes.\nThe release deadline for the audit is Friday the 14th.\n")
    return docs


def _page_seven(response: Any) -> Any:
    (source,) = [s for s in response.source_nodes if s.node.metadata["file_path"] == "q3.pdf"]
    return source


@pytest.mark.parametrize("environment", ["local", "subprocess"])
async def test_a_fact_on_page_seven_is_answered_and_its_source_node_names_the_page_and_line(
    fake_server: FakeOpenAIServer, openai_options: dict[str, Any], folder: Path, environment: str
) -> None:
    fake_server.root = scripted_root(ROOT)
    fake_server.leaf = leaf
    engine = RLMQueryEngine.from_paths(["q3.pdf"], roots=[folder], environment=environment, **openai_options)
    response = await engine.aquery("What is the vault combination?")
    assert response.response == CODE
    source = _page_seven(response)
    meta = source.node.metadata
    assert (meta["file_name"], meta["page"], meta["page_label"]) == ("q3.pdf", 7, "7")
    assert (meta["line_start"], meta["line_end"], meta["place"]) == (4, 4, "p7:L4")
    assert meta["format"] == "pdf" and "places" not in meta and "pages" not in meta
    # The node is page 7 itself (its text, its offsets in the document), and points at the whole document.
    page = source.node.get_content(metadata_mode=MetadataMode.NONE)
    assert writers.SECRET in page and page.startswith("[page 7]") and "Section 8.1" not in page
    (document,) = engine.nodes
    start, end = document.metadata["pages"][6]
    assert (source.node.start_char_idx, source.node.end_char_idx) == (start, end)
    assert source.node.relationships[NodeRelationship.SOURCE].node_id == "q3.pdf"
    [[first, last]] = meta["rlm_char_ranges"]
    assert document.text[first:last] == writers.SECRET
    assert source.score == pytest.approx(len(writers.SECRET) / (end - start))
    # The answer's citation is the same place, as every adapter gives it.
    [citation] = (response.metadata or {})["citations"]
    assert (citation["path"], citation["place"]) == ("q3.pdf", PAGE_SEVEN_LINE_FOUR)
    # The places stay out of what LlamaIndex gives its own LLMs, not out of what the RLM's code sees.
    assert "places" not in document.get_content(metadata_mode=MetadataMode.LLM)
    assert engine.documents[0]["metadata"]["pages"][6] == [start, end]


READ_ALL = """```repl
import re
lines = [l for d in context for l in d["text"].splitlines() if re.search("combination|monthly fee|deadline", l)]
answer = llm_query("Summarise:" + "".join("\\n- " + l for l in lines))
print(answer)
```"""


def test_a_folder_of_a_pdf_a_docx_and_a_text_file(folder: Path) -> None:
    heard: list[ConversionProgress] = []
    engine = RLMQueryEngine.from_paths(
        folder, roots=folder, progress=heard.append, **scripted([READ_ALL, 'FINAL_VAR("answer")'])
    )
    assert [d["id"] for d in engine.documents] == ["contract.docx", "notes.txt", "q3.pdf"]
    assert [p.text() for p in heard] == [f"converting {n}/2 documents" for n in range(3)]
    assert engine.skipped == []
    response = engine.query("What are the combination, the fee and the deadline?")
    assert response.response == CODE
    by_file = {s.node.metadata["file_path"]: s.node.metadata for s in response.source_nodes}
    assert sorted(by_file) == ["contract.docx", "notes.txt", "q3.pdf"]
    assert by_file["q3.pdf"]["place"] == "p7:L4"
    assert (by_file["contract.docx"]["format"], by_file["contract.docx"]["page"]) == ("docx", 1)
    assert by_file["contract.docx"]["place"].startswith("p1:L")
    # A text file keeps the shape of every other source node: the whole document, with its read ranges.
    notes = by_file["notes.txt"]
    assert "place" not in notes and "page" not in notes
    assert notes["rlm_line_ranges"] == [[2, 2]] and notes["file_name"] == "notes.txt"
    (text_node,) = [s.node for s in response.source_nodes if s.node.node_id == "notes.txt"]
    assert text_node.get_content().startswith("Meeting notes.")


READ_SALES = """```repl
book = next(d for d in context if d["metadata"]["format"] == "xlsx")
line = next(l for l in book["text"].splitlines() if "North region" in l)
answer = llm_query("Which region, and its total? " + line)
```"""


def test_a_spreadsheet_read_is_one_node_for_its_sheet_cited_by_cell(tmp_path: Path) -> None:
    writers.xlsx(tmp_path / "book.xlsx")
    engine = RLMQueryEngine.from_paths(["book.xlsx"], roots=[tmp_path], **scripted([READ_SALES, "FINAL('North')"]))
    response = engine.query("Which region?")
    # The sheet's cells are places of their own; what was read of the sheet is one node, not one per cell.
    (source,) = response.source_nodes
    meta = source.node.metadata
    assert (source.node.node_id, meta["sheet"], meta["place"]) == (
        "book.xlsx:Q3 Sales",
        "Q3 Sales",
        "'Q3 Sales'!C5",
    )
    assert meta["line_start"] is None and "page" not in meta
    assert (
        source.node.get_content().startswith("[sheet Q3 Sales]\nrow 5:") and "row 20" not in source.node.get_content()
    )


def test_an_encrypted_pdf_is_skipped_with_its_reason_and_the_rest_answered(folder: Path) -> None:
    writers.pdf(folder / "locked.pdf", password="secret")
    with pytest.warns(UserWarning, match=r"skipped 1 file \(locked\.pdf: encrypted: it needs a password"):
        engine = RLMQueryEngine.from_paths(["."], roots=[folder], **scripted(ROOT))
    assert [(s.path, s.reason) for s in engine.skipped] == [("locked.pdf", "encrypted: it needs a password to open")]
    assert "locked.pdf" not in [d["id"] for d in engine.documents]
    response = engine.query("What is the vault combination?")
    assert response.response == CODE and _page_seven(response).node.metadata["place"] == "p7:L4"


def test_an_elf_binary_named_pdf_is_skipped_not_parsed(folder: Path) -> None:
    writers.elf_named_pdf(folder / "tool.pdf")
    with pytest.warns(UserWarning, match=r"tool\.pdf: not a PDF file"):
        engine = RLMQueryEngine.from_paths([folder / "tool.pdf", folder / "q3.pdf"], roots=[folder], **scripted(ROOT))
    ((path, reason),) = [(s.path, s.reason) for s in engine.skipped]
    assert path == "tool.pdf" and reason.startswith("not a PDF file: it should start with '%PDF-'") and "ELF" in reason
    assert engine.query("combination?").response == CODE


def test_a_document_without_the_documents_extra_is_skipped_naming_the_extra(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "docx" else real(name, *a))
    with pytest.warns(UserWarning, match=r"contract\.docx: reading a DOCX file needs .*rlm-adapters\[documents\]"):
        engine = RLMQueryEngine.from_paths(folder, roots=folder, **scripted(ROOT))
    assert [s.path for s in engine.skipped] == ["contract.docx"]
    assert [d["id"] for d in engine.documents] == ["notes.txt", "q3.pdf"]
    assert engine.query("combination?").response == CODE


def test_many_skipped_files_are_all_listed_and_the_warning_stays_short(folder: Path) -> None:
    for number in range(12):
        writers.elf_named_pdf(folder / f"bin{number:02d}.pdf")
    with pytest.warns(UserWarning, match=r"skipped 12 files \(bin00\.pdf: not a PDF.*bin09\.pdf: .*; and 2 more\)"):
        engine = RLMQueryEngine.from_paths(folder, roots=folder, **scripted(ROOT))
    assert [s.path for s in engine.skipped] == [f"bin{number:02d}.pdf" for number in range(12)]


def test_nothing_readable_is_the_loaders_error_naming_each_file(tmp_path: Path) -> None:
    writers.pdf(tmp_path / "locked.pdf", password="secret")
    with pytest.raises(FileLoadError, match=r"no readable text files .*locked\.pdf: encrypted"):
        RLMQueryEngine.from_paths("locked.pdf", roots=tmp_path, **scripted(ROOT))


def test_a_path_outside_the_roots_is_refused(tmp_path: Path, folder: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(PathNotAllowedError, match=r"is outside the allowed roots .*roots= in Python"):
        RLMQueryEngine.from_paths([folder / "q3.pdf"], roots=[elsewhere], **scripted(ROOT))
    with pytest.raises(PathNotAllowedError, match=r"'\.\./docs/q3\.pdf'.* is outside the allowed roots"):
        RLMQueryEngine.from_paths(["../docs/q3.pdf"], roots=[elsewhere], **scripted(ROOT))


def test_a_symlink_out_of_the_roots_is_refused_named_and_skipped_walked(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    writers.pdf(outside / "private.pdf")
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.txt").write_text("The vault combination is 8812-BRAVO, says the note.\n")
    os.symlink(outside / "private.pdf", root / "link.pdf")
    with pytest.raises(PathNotAllowedError, match=r"'link\.pdf' leads through a symlink outside the allowed roots"):
        RLMQueryEngine.from_paths(["link.pdf"], roots=[root], **scripted(ROOT))
    with pytest.warns(UserWarning, match=r"link\.pdf"):
        engine = RLMQueryEngine.from_paths([root], roots=[root], **scripted(ROOT))
    assert [s.path for s in engine.skipped] == ["link.pdf"] and "outside" in engine.skipped[0].reason
    assert [d["id"] for d in engine.documents] == ["notes.txt"]  # the private PDF was never converted


def test_roots_default_to_the_working_folder(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)
    engine = RLMQueryEngine.from_paths("q3.pdf", **scripted(ROOT))
    assert engine.query("combination?").response == CODE
    with pytest.raises(PathNotAllowedError, match=r"outside the allowed roots"):
        RLMQueryEngine.from_paths([folder.parent], **scripted(ROOT))


def test_bad_arguments_name_themselves(folder: Path) -> None:
    writers.pdf(folder / "big.pdf", pages=3, secret_page=None)
    with pytest.raises(FileLoadError, match=r"cap \(max_bytes=\) .*raise the cap"):
        RLMQueryEngine.from_paths([folder], roots=[folder], max_bytes=200, **scripted(ROOT))
    with pytest.raises(FileLoadError, match=r"max_files="):
        RLMQueryEngine.from_paths([folder], roots=[folder], max_files=1, **scripted(ROOT))
    with pytest.raises(TypeError, match=r"roots must be a path or a list of paths, got 3"):
        RLMQueryEngine.from_paths([folder], roots=3, **scripted(ROOT))  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"from_paths\(\) got an unexpected keyword argument 'root' \(did you mean roots=\?\)"
    ):
        RLMQueryEngine.from_paths([folder], root=[folder], **scripted(ROOT))


async def test_the_engine_as_a_query_engine_tool_gives_the_agent_the_page(folder: Path) -> None:
    engine = RLMQueryEngine.from_paths(["q3.pdf"], roots=[folder], **scripted(ROOT))
    tool = QueryEngineTool.from_defaults(engine, name="reports", description="Answers about the reports.")

    def agent_llm(messages: list[ChatMessage], **kwargs: Any) -> ChatMessage:
        results = [m for m in messages if m.role == MessageRole.TOOL]
        if not results:
            call = ToolCallBlock(tool_call_id="call-1", tool_name="reports", tool_kwargs={"input": "combination?"})
            return ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])
        return ChatMessage(role=MessageRole.ASSISTANT, content=f"It is {results[-1].content}.")

    agent = FunctionAgent(tools=[tool], llm=MockFunctionCallingLLM(response_generator=agent_llm))
    result = await agent.run(user_msg="What is the vault combination?")
    assert str(result) == f"It is {CODE}."
    raw = result.tool_calls[0].tool_output.raw_output
    assert [(n.node.node_id, n.node.metadata["place"]) for n in raw.source_nodes] == [("q3.pdf:p7", "p7:L4")]
