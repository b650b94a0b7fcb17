"""Real documents nobody on this project made, converted behind the walls and checked against a reference reading.

`.ci/setup_documents.sh` installs them (Debian manuals as PDF and EPUB, R packages' example workbooks, and
poppler-utils); each test skips, naming the Debian package, when its document is absent. The references:
``pdftotext`` for a PDF, openpyxl reading every cell for a workbook (99% of each sheet's text cells present
in that sheet's text). Every PDF `benchmarks.documents_bench` reads is held, page by page, to pdftotext:

- run-together words (tokens holding 20+ letters) within 0.5 points of pdftotext's;
- at least 90% of the 6-word phrases sampled from pdftotext's page N found on our page N, and at least 95%
  of those pdftotext's two readings agree on (its ``-layout`` reading holds the phrase on that page too:
  where they disagree, as on a table read column by column, the order is pdftotext's guess). A file with
  fewer than `MIN_AGREED_PHRASES` agreed phrases is a card of tables in columns (asyRefCard.pdf: 6 of 60),
  judged by its rows instead;
- table rows: of ``pdftotext -layout``'s rows with 3+ cells, at least 90% have their cells in order on one
  line of ours, on every file with 20 such rows or more but two: gnuplot.pdf (math set in table rows, roots
  and integrals that ``-layout`` draws otherwise: 88%) and asymptote.pdf, whose "rows" are no table (columns
  of colour names and figures' axis labels, read column by column as the page lays them out); the card's
  rows have a test of their own (``-layout`` puts both card columns on one line).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks.documents_bench import (
    MIN_AGREED_PHRASES,
    REAL_PDFS,
    in_order,
    pages_of,
    pdftotext_pages,
    phrases_found,
    rows_kept,
    run_together,
    words,
)
from rlm_adapters.files import load_paths

UNPACKED = Path(os.environ.get("RLM_REAL_DOCUMENTS", "/opt/rlm-real-documents"))
R_LIBRARY = "usr/lib/R/site-library"
PACKAGES = {
    "debmake-doc.en.pdf": "debmake-doc",
    "developers-reference.pdf": "developers-reference",
    "R-intro.pdf": "r-doc-pdf",
    "R-data.pdf": "r-doc-pdf",
    "R-FAQ.pdf": "r-doc-pdf",
    "gnuplot.pdf": "gnuplot-doc",
    "asymptote.pdf": "asymptote-doc",
    "asyRefCard.pdf": "asymptote-doc",
    "libtasn1.pdf": "libtasn1-doc",
    "shared-mime-info-spec.pdf": "shared-mime-info",
}
PDFS = {Path(path).name: (PACKAGES[Path(path).name], path) for path in REAL_PDFS}
ROWS_HELD = {"gnuplot.pdf": 88.0, "asymptote.pdf": None, "asyRefCard.pdf": None}  # see the docstring; others: 90%
WORKBOOKS = {
    "datasets.xlsx": ("r-cran-readxl", "readxl/extdata/datasets.xlsx"),
    "deaths.xlsx": ("r-cran-readxl", "readxl/extdata/deaths.xlsx"),
    "geometry.xlsx": ("r-cran-readxl", "readxl/extdata/geometry.xlsx"),
    "type-me.xlsx": ("r-cran-readxl", "readxl/extdata/type-me.xlsx"),
    "readTest.xlsx": ("r-cran-openxlsx", "openxlsx/extdata/readTest.xlsx"),
    "loadExample.xlsx": ("r-cran-openxlsx", "openxlsx/extdata/loadExample.xlsx"),
}


def real_pdf(name: str) -> Path:
    package, path = PDFS[name]
    if shutil.which("pdftotext") is None:
        pytest.skip("needs pdftotext, the reference reading (apt-get install poppler-utils; .ci/setup_documents.sh)")
    if not os.path.exists(path):
        pytest.skip(f"needs the Debian package {package} (apt-get install {package}; .ci/setup_documents.sh)")
    return Path(path)


def converted(path: Path) -> dict[str, Any]:
    loaded = load_paths([str(path)], [path.parent])
    assert loaded.skipped == []
    (document,) = loaded.documents()
    return document


@functools.cache
def our_pages(path: Path) -> list[str]:
    """The PDF converted behind the walls, one string per page (each page's heading line left out)."""
    document = converted(path)
    return pages_of(document["text"], [offset for offset, kind, _ in document["metadata"]["places"] if kind == "page"])


@pytest.mark.parametrize("name", list(PDFS))
@pytest.mark.slow
def test_a_real_pdf_reads_as_pdftotext_does_page_by_page(name: str) -> None:
    path = real_pdf(name)
    ours = our_pages(path)
    reference = pdftotext_pages(str(path))
    assert len(ours) == len(reference)
    assert run_together(ours) <= run_together(reference) + 0.5
    agreed, _, counted = phrases_found(reference, ours, pdftotext_pages(str(path), layout=True))
    if counted < MIN_AGREED_PHRASES:
        assert name == "asyRefCard.pdf", f"only {counted} phrases agreed: judge {name} by its rows"
        return
    every, _, _ = phrases_found(reference, ours)
    assert every >= 90.0, f"{every:.1f}% of pdftotext's phrases found on the same page"
    assert agreed >= 95.0, f"{agreed:.1f}% of the {counted} phrases pdftotext's two readings agree on"


@pytest.mark.parametrize("name", list(PDFS))
@pytest.mark.slow
def test_a_real_pdfs_tables_keep_their_rows(name: str) -> None:
    path = real_pdf(name)
    kept, rows = rows_kept(pdftotext_pages(str(path), layout=True), our_pages(path))
    held = ROWS_HELD.get(name, 90.0)
    if rows < 20 or held is None:
        pytest.skip(f"{name}: {rows} rows of 3+ cells, {kept:.1f}% kept; no table to hold (see the docstring)")
    assert kept >= held, f"{kept:.1f}% of {rows} table rows on one line"


@pytest.mark.slow
def test_a_row_with_a_superscript_stays_on_one_line() -> None:
    """gnuplot's table of math functions: PDFium breaks a line where the baseline moves (sinh⁻¹ x)."""
    path = real_pdf("gnuplot.pdf")
    layout = pdftotext_pages(str(path), layout=True)
    table = next(n for n, page in enumerate(layout) if re.search(r"asinh\(x\)\s{2,}any", page))
    lines = [" " + " ".join(words(line)) + " " for line in our_pages(path)[table].splitlines()]
    rows = [
        [" " + " ".join(words(cell)) + " " for cell in re.split(r"\s{2,}", row.strip())]
        for row in layout[table].splitlines()
        if re.match(r"\s*a?(sinh|tanh|tan)\(", row)
    ]
    assert len(rows) >= 3 and all(any(in_order(line, cells) for line in lines) for cells in rows), rows


def test_a_reference_cards_tables_keep_their_rows() -> None:
    """asyRefCard.pdf's first page: two card columns of two-column tables. pdftotext reads each table column
    by column, and ``-layout`` puts both card columns on one line, so the card's rows are its layout's
    lines cut where the second card column starts (its heading, "Operators"), cells 3+ spaces apart."""
    path = real_pdf("asyRefCard.pdf")
    lines = pdftotext_pages(str(path), layout=True)[0].splitlines()
    cut = lines[0].index("Operators")
    ours = [" " + " ".join(words(line)) + " " for line in our_pages(path)[0].splitlines()]
    theirs = [" " + " ".join(words(line)) + " " for line in pdftotext_pages(str(path))[0].splitlines()]
    rows = [
        cells
        for half in ([line[:cut] for line in lines], [line[cut:] for line in lines])
        for row in half
        if len(cells := [" " + " ".join(words(c)) + " " for c in re.split(r"\s{3,}", row.strip()) if words(c)]) >= 2
    ]
    kept = sum(any(in_order(line, cells) for line in ours) for cells in rows)
    assert len(rows) >= 40 and kept >= 0.9 * len(rows), f"{kept} of {len(rows)} rows on one line"
    assert sum(any(in_order(line, cells) for line in theirs) for cells in rows) < 0.1 * len(rows)  # the reference's own


def test_a_real_pdfs_own_page_labels_are_kept_beside_its_page_numbers() -> None:
    path = real_pdf("R-intro.pdf")
    meta = converted(path)["metadata"]
    labels = meta["page_labels"]
    assert len(labels) == len(meta["pages"]) and labels[2] == "i" and "1" in labels
    first = labels.index("1")  # the printed page 1 comes after the front matter
    start, _ = meta["pages"][first]
    assert converted(path)["text"][start:].startswith(f"[page {first + 1} (1)]\n")


def reference_cells(path: Path) -> dict[str, list[str]]:
    """Every text cell of each sheet, read by openpyxl (whole workbook; read-only to its last cell when the
    full reader refuses a part the file lacks)."""
    openpyxl = pytest.importorskip("openpyxl", reason="needs openpyxl (pip install 'rlm-adapters[documents]')")
    try:
        book = openpyxl.load_workbook(path, data_only=True)
    except KeyError:  # a relationship to a missing part (readxl's datasets.xlsx names a drawing it lacks)
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    cells: dict[str, list[str]] = {}
    for sheet in book.worksheets:
        if hasattr(sheet, "reset_dimensions"):
            sheet.reset_dimensions()
        values = [value for row in sheet.iter_rows(values_only=True) for value in row]
        cells[sheet.title] = [" ".join(v.split()) for v in values if isinstance(v, str) and v.strip()]
    return cells


@pytest.mark.parametrize("name", sorted(WORKBOOKS))
@pytest.mark.slow
def test_a_real_workbook_keeps_every_text_cell(name: str) -> None:
    package, inside = WORKBOOKS[name]
    path = UNPACKED / R_LIBRARY / inside
    if not path.exists():
        pytest.skip(f"needs the Debian package {package}, unpacked by .ci/setup_documents.sh")
    document = converted(path)
    sheets = document["metadata"]["sheets"]
    for title, cells in reference_cells(path).items():
        start, end = sheets[title]
        text = document["text"][start:end]
        present = sum(cell in text for cell in cells)
        assert present >= 0.99 * len(cells), f"{title}: {present} of {len(cells)} text cells"


def test_a_citation_keeps_the_page_number_and_adds_the_printed_label_where_it_differs() -> None:
    from rlm_adapters.sources._documents import corpus_of

    path = real_pdf("R-intro.pdf")
    document = converted(path)
    (corpus,) = corpus_of([document])
    labels = document["metadata"]["page_labels"]
    first = labels.index("1")
    start, end = document["metadata"]["pages"][first + 4]  # page 5 as printed, a page further on as counted
    line = document["text"].index("\n", start) + 1
    place = corpus.place_of(line, line + 5)
    assert place is not None and place.start == str(first + 5) and str(place) == f"p{first + 5}:L{place.line_start} (5)"
    assert str(corpus.place_of(start, end + 10)) == f"p{first + 5}-{first + 6} (5-6)"
    start, _ = document["metadata"]["pages"][2]  # page 3 is printed i
    assert str(corpus.place_of(start + 20, start + 25)).endswith(" (i)")


def test_a_llama_index_page_node_of_a_real_pdf_carries_its_printed_label() -> None:
    """LlamaIndex's own PDF reader gives ``page_label`` as the PDF's label; ours too, beside the page index."""
    pytest.importorskip("llama_index.core", reason="needs llama-index-core (pip install 'rlm-adapters[llama-index]')")
    from rlm_adapters import ScriptedModel
    from rlm_adapters.llama_index import RLMQueryEngine

    path = real_pdf("R-intro.pdf")
    first = converted(path)["metadata"]["page_labels"].index("1")
    read = f'start, end = context[0]["metadata"]["pages"][{first + 4}]\nprint(context[0]["text"][start:end])'
    code = f"```repl\n{read}\n```"
    model = ScriptedModel([code, 'FINAL("read")'])
    engine = RLMQueryEngine.from_paths([path.name], roots=[path.parent], backend=model, environment="local")
    (source,) = engine.query("What does page 5 say?").source_nodes
    meta = source.node.metadata
    assert (meta["page"], meta["page_label"]) == (first + 5, "5")
    assert meta["place"].startswith(f"p{first + 5}") and meta["place"].endswith(" (5)")
