"""Issue 36: `SimpleDirectoryReader` without ``llama-index-readers-file`` gives a PDF's document the text
"%PDF-1.5..."; `RLMQueryEngine` used to hand those bytes to the model silently. They are left out, named."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import SimpleDirectoryReader

from rlm_adapters import ScriptedModel
from rlm_adapters.errors import ContextError
from rlm_adapters.llama_index import RLMQueryEngine
from rlm_adapters.testing import by_turn
from tests.documents import writers


def folder_of_notes(tmp_path: Path) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    writers.pdf(notes / "report.pdf")
    writers.xlsx(notes / "book.xlsx")
    (notes / "review.md").write_text("Decided at the review: drop the beta.\n")
    return notes


def test_raw_pdf_and_office_bytes_are_left_out_with_a_warning_naming_from_paths(tmp_path: Path) -> None:
    docs = SimpleDirectoryReader(str(folder_of_notes(tmp_path))).load_data()
    assert any(doc.text.startswith("%PDF-") for doc in docs)  # what the reader really gives
    look = "```repl\nprint([d['metadata']['file_name'] for d in context])\n```"
    root = by_turn(look, "FINAL(drop the beta)", model_name="root")
    with pytest.warns(UserWarning, match=r"left out 2 documents .*RLMQueryEngine\.from_paths") as caught:
        engine = RLMQueryEngine.from_documents(docs, backend=root, environment="local")
    (warning,) = caught
    assert "book.xlsx: its text is the raw bytes of a ZIP archive" in str(warning.message)
    assert "report.pdf: its text is the raw bytes of a PDF file ('%PDF-1.3" in str(warning.message)
    assert sorted(Path(s.path).name for s in engine.skipped) == ["book.xlsx", "report.pdf"]
    response = engine.query("What was decided?")
    assert str(response) == "drop the beta"
    assert [d["metadata"]["file_name"] for d in engine.documents] == ["review.md"]


def test_only_raw_bytes_is_refused_in_one_line(tmp_path: Path) -> None:
    notes = folder_of_notes(tmp_path)
    (notes / "review.md").unlink()
    docs = SimpleDirectoryReader(str(notes)).load_data()
    with pytest.raises(ContextError) as caught:
        RLMQueryEngine.from_documents(docs, backend=ScriptedModel(["FINAL(x)"], model_name="r"), environment="local")
    message = str(caught.value)
    assert message.startswith("every document is a file's raw bytes, not text") and "from_paths" in message
    assert "\n" not in message
