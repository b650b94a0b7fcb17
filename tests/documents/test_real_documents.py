"""Real documents nobody on this project made, converted behind the walls and checked against a reference reading.

`.ci/setup_documents.sh` installs them (Debian manuals as PDF and EPUB, R packages' example workbooks, and
poppler-utils); each test skips, naming the Debian package, when its document is absent. The references:
``pdftotext`` for a PDF (run-together words within 0.5 points of it, 90% of the 6-word phrases of its page
N found on our page N, table rows kept on one line), openpyxl reading every cell for a workbook (99% of
each sheet's text cells present in that sheet's text).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchmarks.documents_bench import pages_of, pdftotext_pages, phrases_found, rows_kept, run_together
from rlm_adapters.files import load_paths

UNPACKED = Path(os.environ.get("RLM_REAL_DOCUMENTS", "/opt/rlm-real-documents"))
R_LIBRARY = "usr/lib/R/site-library"
PDFS = {
    "debmake-doc.en.pdf": ("debmake-doc", "/usr/share/doc/debmake-doc/debmake-doc.en.pdf"),
    "developers-reference.pdf": ("developers-reference", "/usr/share/developers-reference/developers-reference.pdf"),
    "R-intro.pdf": ("r-doc-pdf", "/usr/share/R/doc/manual/R-intro.pdf"),
    "gnuplot.pdf": ("gnuplot-doc", "/usr/share/doc/gnuplot/gnuplot.pdf"),
}
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


@pytest.mark.parametrize("name", sorted(PDFS))
@pytest.mark.slow
def test_a_real_pdf_reads_as_pdftotext_does_page_by_page(name: str) -> None:
    path = real_pdf(name)
    document = converted(path)
    starts = [offset for offset, kind, _ in document["metadata"]["places"] if kind == "page"]
    ours = pages_of(document["text"], starts)
    reference = pdftotext_pages(str(path))
    assert len(ours) == len(reference)
    assert run_together(ours) <= run_together(reference) + 0.5
    found, _ = phrases_found(reference, ours)
    assert found >= 90.0, f"{found:.1f}% of pdftotext's phrases found on the same page"


@pytest.mark.parametrize("name", ["developers-reference.pdf", "R-intro.pdf"])
def test_a_real_pdfs_tables_keep_their_rows(name: str) -> None:
    path = real_pdf(name)
    document = converted(path)
    starts = [offset for offset, kind, _ in document["metadata"]["places"] if kind == "page"]
    kept, rows = rows_kept(pdftotext_pages(str(path), layout=True), pages_of(document["text"], starts))
    assert rows >= 20 and kept >= 90.0, f"{kept:.1f}% of {rows} table rows on one line"


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
