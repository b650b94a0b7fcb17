"""rlm ask over documents: a PDF keeps its pages for the model's code, and the conversions are counted."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rlm_adapters.cli import _read_context
from rlm_adapters.documents import CONVERSIONS
from rlm_adapters.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from rlm_adapters.testing import FakeOpenAIServer
from tests.documents import writers
from tests.test_cli import run_rlm, server_env

READ_PAGE_SEVEN = """```repl
(report,) = context
start, end = report["metadata"]["pages"][6]
page = report["text"][start:end]
print(report["metadata"]["format"], page)
found = page[page.index("The vault"):].split(".")[0] + "."
```"""


@pytest.fixture(autouse=True)
def _fresh_conversions() -> None:
    CONVERSIONS.clear()


def test_rlm_ask_over_one_pdf_gives_the_model_its_pages(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    writers.pdf(tmp_path / "report.pdf")
    fake_server.root = [READ_PAGE_SEVEN, "FINAL_VAR(found)"]
    done = run_rlm(
        ["ask", "-c", "report.pdf", "--environment", "local", "What is the combination?"],
        server_env(fake_server),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == writers.SECRET
    roots = [r for r in fake_server.requests_log if r.get("model") == "root-model"]
    assert "pdf [page 7]" in str(roots[1]["messages"][-1]["content"])


def test_rlm_ask_names_a_skipped_document_and_answers_from_the_others(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    writers.pdf(tmp_path / "report.pdf")
    writers.elf_named_pdf(tmp_path / "program.pdf")
    fake_server.root = ["FINAL(read)"]
    done = run_rlm(["ask", "-c", ".", "--environment", "local", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rlm: skipped program.pdf: not a PDF file: it should start with '%PDF-'" in done.stderr


def test_the_context_reader_counts_the_conversions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a.pdf", "b.pdf"):
        writers.pdf(tmp_path / name, pages=2)
    monkeypatch.chdir(tmp_path)
    heard: list[str] = []
    args = argparse.Namespace(context=["."], max_bytes=DEFAULT_MAX_BYTES, max_files=DEFAULT_MAX_FILES)
    context = _read_context(args, heard.append)
    assert heard == ["converting 0/2 PDFs", "converting 1/2 PDFs", "converting 2/2 PDFs"]
    assert sorted(d["metadata"]["path"] for d in context) == ["a.pdf", "b.pdf"]


def test_rlm_ask_sources_cite_the_page(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    writers.pdf(tmp_path / "report.pdf")
    fake_server.root = [READ_PAGE_SEVEN, "FINAL_VAR(found)"]
    done = run_rlm(
        ["ask", "-c", "report.pdf", "--environment", "local", "--sources", "What is the combination?"],
        server_env(fake_server),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    answer, sources = done.stdout.split("\n\nSources:\n", 1)
    assert answer.strip() == writers.SECRET and sources.splitlines() == ["- report.pdf:p7"]
