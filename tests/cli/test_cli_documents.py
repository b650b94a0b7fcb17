"""rlm ask over documents: a PDF keeps its pages for the model's code, and the conversions are counted."""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import os
from pathlib import Path

import pytest

from rlm_adapters.cli.ask import _read_context
from rlm_adapters.documents import CONVERSIONS
from rlm_adapters.files import DEFAULT_MAX_BYTES, DEFAULT_MAX_FILES
from rlm_adapters.testing import FakeOpenAIServer
from tests.cli.test_cli import run_rlm, server_env
from tests.documents import writers

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


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_rlm_ask_sources_cite_the_page_and_its_line(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    writers.pdf(tmp_path / "report.pdf")
    fake_server.root = [READ_PAGE_SEVEN, "FINAL_VAR(found)"]
    done = run_rlm(
        ["ask", "-c", "report.pdf", "--environment", "local", "--sources", "What is the combination?"],
        server_env(fake_server),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    answer, sources = done.stdout.split("\n\nSources:\n", 1)
    assert answer.strip() == writers.SECRET and sources.splitlines() == ["- report.pdf:p7:L4"]


def test_a_second_rlm_ask_reads_the_kept_conversions_and_runs_no_converter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36: every `rlm ask` converted everything again. Now the second reading of the same folder, in a
    fresh process's state, launches no converter and says where its documents came from."""
    from rlm_adapters.documents import forget_conversions

    for name in ("a.pdf", "b.pdf"):
        writers.pdf(tmp_path / name, pages=2)
    monkeypatch.setenv("RLM_DOCUMENT_CACHE", str(tmp_path / "store"))
    monkeypatch.chdir(tmp_path)
    launched = writers.count_conversions(monkeypatch)
    args = argparse.Namespace(context=["a.pdf", "b.pdf"], max_bytes=DEFAULT_MAX_BYTES, max_files=DEFAULT_MAX_FILES)
    forget_conversions()
    first = _read_context(args)
    assert len(launched) == 2
    forget_conversions()  # what the next `rlm ask` starts with
    heard: list[str] = []
    second = _read_context(args, heard.append)
    forget_conversions()
    assert len(launched) == 2 and second == first
    assert heard[-1] == "converting 2/2 PDFs (2 from the cache)"


@pytest.mark.slow
def test_rlm_ask_twice_converts_once_across_processes(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    writers.pdf(tmp_path / "report.pdf")
    env = {**server_env(fake_server), "RLM_DOCUMENT_CACHE": str(tmp_path / "store")}
    fake_server.root = [READ_PAGE_SEVEN, "FINAL_VAR(found)"] * 2
    args = ["ask", "-c", "report.pdf", "--environment", "local", "What is the combination?"]
    first = run_rlm(args, env, tmp_path)
    assert first.returncode == 0, first.stderr
    (entry,) = (tmp_path / "store").glob("*.conv")
    written = entry.stat()
    os.utime(entry, (1_000, 1_000))
    second = run_rlm(args, env, tmp_path)
    assert second.returncode == 0, second.stderr
    assert first.stdout == second.stdout and second.stdout.strip() == writers.SECRET
    read = entry.stat()
    assert read.st_ino == written.st_ino and read.st_mtime > 1_000  # read (its last use moved), not written again


def test_rlm_ask_refuses_a_document_cache_others_can_write_in_one_line(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    writers.pdf(tmp_path / "report.pdf")
    store = tmp_path / "store"
    store.mkdir()
    store.chmod(0o777)
    env = {**server_env(fake_server), "RLM_DOCUMENT_CACHE": str(store)}
    done = run_rlm(["ask", "-c", "report.pdf", "--environment", "local", "q"], env, tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"rlm: the document cache '{store}' can be written")
    assert list(store.iterdir()) == [] and fake_server.requests_log == []


@pytest.mark.slow
def test_rlm_ask_no_document_cache_keeps_nothing_on_disk(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    writers.pdf(tmp_path / "report.pdf")
    env = {**server_env(fake_server), "RLM_DOCUMENT_CACHE": str(tmp_path / "store")}
    fake_server.root = ["FINAL(read)"]
    done = run_rlm(["ask", "-c", "report.pdf", "--environment", "local", "--no-document-cache", "q"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.slow
def test_rlm_ask_says_on_stderr_what_a_converter_cut_and_the_model_sees_it_too(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    writers.huge_output_notebook(tmp_path / "run.ipynb", output_bytes=2 * 1024**2)
    writers.pdf(tmp_path / "report.pdf")
    fake_server.root = ['```repl\nprint(context[1]["text"][-300:])\n```', "FINAL(read)"]
    done = run_rlm(["ask", "-c", ".", "--environment", "local", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rlm: run.ipynb: outputs over 20,000 characters were cut" in done.stderr.splitlines()
    roots = [r for r in fake_server.requests_log if r.get("model") == "root-model"]
    assert "more characters of output cut]" in str(roots[1]["messages"][-1]["content"])


def test_rlm_ask_reads_a_folder_of_compressed_files(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    """Issue 51: each .gz of Debian's documentation folder was "skipped: binary file"."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "changelog.gz").write_bytes(gzip.compress(b"1.2 fixed the flux capacitor\n" * 50))
    (docs / "NEWS.xz").write_bytes(lzma.compress(b"the code word is heron\n"))
    (docs / "src.tar.gz").write_bytes(gzip.compress(b"x"))
    fake_server.root = [
        "```repl\nfor d in context:\n    print(d['id'], d['metadata'].get('compression'), d['text'][:29])\n```",
        "FINAL(read)",
    ]
    done = run_rlm(["ask", "-c", "docs", "--environment", "local", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rlm: skipped docs/src.tar.gz: a tar archive is not read; unpack it (tar -xf) and pass the folder" in (
        done.stderr
    )
    assert "binary file" not in done.stderr
    roots = [r for r in fake_server.requests_log if r.get("model") == "root-model"]
    shown = str(roots[1]["messages"][-1]["content"])
    assert "docs/NEWS.xz xz the code word is heron" in shown
    assert "docs/changelog.gz gzip 1.2 fixed the flux capacitor" in shown


def test_a_latin1_file_reaches_the_model_intact_and_stderr_names_the_encoding(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Issue 51: a Latin-1 file reached the model as 'Caf\ufffd na\ufffdve r\ufffdsum\ufffd \ufffd100', nothing said."""
    (tmp_path / "menu.txt").write_bytes("Café naïve résumé €100\n".encode("cp1252"))
    fake_server.root = ["```repl\nprint(context)\n```", "FINAL(read)"]
    done = run_rlm(["ask", "-c", "menu.txt", "--environment", "local", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rlm: menu.txt: not UTF-8: read as Windows-1252 (its accented letters say so)\n" in done.stderr
    roots = [r for r in fake_server.requests_log if r.get("model") == "root-model"]
    assert "Café naïve résumé €100" in str(roots[1]["messages"][-1]["content"])
    assert "\ufffd" not in json.dumps(roots, ensure_ascii=False)


def test_one_compressed_text_file_is_a_string_context_like_any_text_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "server.log.gz").write_bytes(gzip.compress(b"GET /health 200\n"))
    (tmp_path / "menu.txt").write_bytes("Café €5\n".encode("cp1252"))
    monkeypatch.chdir(tmp_path)
    for name, text in (("server.log.gz", "GET /health 200\n"), ("menu.txt", "Café €5\n")):
        args = argparse.Namespace(context=[name], max_bytes=DEFAULT_MAX_BYTES, max_files=DEFAULT_MAX_FILES)
        assert _read_context(args) == text  # the text itself, as for a UTF-8 file: no list of one document
