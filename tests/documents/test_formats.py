"""Each format, written by its real writer, converted behind the walls: text, structure and places kept."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

from rlm_adapters.files import LoadResult, load_paths
from tests.documents import writers


def load(*paths: Path) -> LoadResult:
    return load_paths([str(p) for p in paths], [paths[0].parent])


def only(path: Path) -> tuple[str, dict[str, Any]]:
    loaded = load(path)
    assert loaded.skipped == []
    (document,) = loaded.documents()
    return document["text"], document["metadata"]


def test_pdf_pages_are_kept_as_places_and_spans(tmp_path: Path) -> None:
    text, meta = only(writers.pdf(tmp_path / "report.pdf"))
    assert meta["format"] == "pdf" and meta["raw_size"] == (tmp_path / "report.pdf").stat().st_size
    assert [place[1:] for place in meta["places"]] == [["page", str(n)] for n in range(1, writers.PAGES + 1)]
    assert len(meta["pages"]) == writers.PAGES and meta["pages"][-1][1] == len(text)
    start, end = meta["pages"][writers.PLANTED_PAGE - 1]
    page = text[start:end]
    assert page.startswith(f"[page {writers.PLANTED_PAGE}]\n") and "vault combination is 8812-BRAVO" in page
    assert text.count("8812-BRAVO") == 1
    assert meta["size"] == len(text.encode())


def test_word_keeps_headings_tables_and_hard_page_breaks(tmp_path: Path) -> None:
    text, meta = only(writers.docx(tmp_path / "agreement.docx"))
    lines = text.splitlines()
    assert lines[:3] == [
        "# Service agreement",
        "# Fees",
        "The monthly fee is 1,250 euros, due on the first working day.",
    ]
    assert "Term | Value" in lines and "Notice | 90 days" in lines
    assert meta["format"] == "docx" and [p[1:] for p in meta["places"]] == [["page", "1"], ["page", "2"]]
    second = text[meta["pages"][1][0] :]
    assert second.strip() == "Either party may end the agreement in writing."


def test_slides_are_places_with_titles_bullets_and_notes(tmp_path: Path) -> None:
    text, meta = only(writers.pptx(tmp_path / "deck.pptx"))
    assert [p[1:] for p in meta["places"]] == [["slide", str(n)] for n in range(1, 6)]
    start, end = meta["slides"][3]
    assert text[start:end] == "[slide 4]\n# Roadmap part 4\nLaunch is on 14 March.\nNotes: Speaker note 4\n"


def test_sheets_and_cells_are_places_and_rows_keep_their_numbers(tmp_path: Path) -> None:
    text, meta = only(writers.xlsx(tmp_path / "book.xlsx"))
    assert set(meta["sheets"]) == {"Sheet1", "Q3 Sales"}
    start, end = meta["sheets"]["Sheet1"]
    sheet = text[start:end].splitlines()
    assert sheet[0] == "[sheet Sheet1]" and sheet[3] == "row 3: 3 | 6 | 9 | 12"
    assert len(sheet) == 22 and sheet[-1] == ""  # the header, 20 rows, the blank line ending the sheet
    places = {label: offset for offset, kind, label in meta["places"] if kind == "cell"}
    assert text[places["Sheet1!A3"] :].startswith("row 3: 3 |")  # a row's line starts with its first cell
    assert text[places["Sheet1!C3"] :].startswith("9 | 12")
    assert text[places["'Q3 Sales'!C5"] :].startswith("row 5:  |  | North region total 7731")  # its first cell
    assert text[meta["sheets"]["Q3 Sales"][0] :].startswith("[sheet Q3 Sales]\nrow 5:  |  | North region total 7731")


def test_a_sheet_that_understates_its_dimension_is_read_to_its_last_stored_cell(tmp_path: Path) -> None:
    # Issue 36: read-only openpyxl trusted <dimension ref="A1"/> and gave one cell of 80, silently.
    text, meta = only(writers.understated_dimension_xlsx(tmp_path / "book.xlsx"))
    start, end = meta["sheets"]["Sheet1"]
    rows = text[start:end].splitlines()
    assert rows[1:21] == [f"row {r}: {r} | {2 * r} | {3 * r} | {4 * r}" for r in range(1, 21)]
    assert "notes" not in meta  # nothing was cut, so nothing is said


def test_notebook_cells_are_places_with_source_and_outputs(tmp_path: Path) -> None:
    text, meta = only(writers.ipynb(tmp_path / "notes.ipynb"))
    assert [p[1:] for p in meta["places"]] == [["cell", f"cell {n}"] for n in range(1, 9)]
    start, end = meta["cells"][6]
    assert text[start:end] == "[cell 7: code]\nprint(evaluate(model))\n[output]\naccuracy: 0.9731\n"


def test_html_keeps_headings_lists_and_tables_and_drops_scripts(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text(
        "<html><head><title>T</title><script>alert('x')</script></head><body><h2>Prices</h2>"
        "<p>Tea costs <b>3</b> euros.</p><ul><li>green</li><li>black</li></ul>"
        "<table><tr><th>kind</th><th>price</th></tr><tr><td>oolong</td><td>5</td></tr></table></body></html>"
    )
    text, meta = only(page)
    assert text == "## Prices\nTea costs 3 euros.\n- green\n- black\nkind | price\noolong | 5\n"
    assert meta["format"] == "html" and "places" not in meta


def test_epub_chapters_in_spine_order(tmp_path: Path) -> None:
    book = tmp_path / "book.epub"
    container = (
        '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
        '<rootfile full-path="OEBPS/content.opf"/></rootfiles></container>'
    )
    opf = (
        '<package xmlns="http://www.idpf.org/2007/opf"><manifest>'
        '<item id="b" href="two.xhtml"/><item id="a" href="one.xhtml"/></manifest>'
        '<spine><itemref idref="a"/><itemref idref="b"/></spine></package>'
    )
    with zipfile.ZipFile(book, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml", container)
        archive.writestr("OEBPS/content.opf", opf)
        archive.writestr("OEBPS/one.xhtml", "<html><body><h1>Opening</h1><p>It was dark.</p></body></html>")
        archive.writestr("OEBPS/two.xhtml", "<html><body><h1>Ending</h1><p>It was light.</p></body></html>")
    text, _ = only(book)
    assert text == "[chapter 1]\n# Opening\nIt was dark.\n[chapter 2]\n# Ending\nIt was light.\n"


def test_rtf_text(tmp_path: Path) -> None:
    writers.needs_reader("striprtf", "RTF files")
    path = tmp_path / "memo.rtf"
    path.write_text(r"{\rtf1\ansi{\fonttbl\f0\fswiss Helvetica;}\f0\pard The memo says caf\'e9.\par Bye.\par}")
    text, meta = only(path)
    assert text.split() == ["The", "memo", "says", "café.", "Bye."] and meta["format"] == "rtf"


def content_xml(path: Path, xml: str) -> Path:
    """An OpenDocument file of one member, ``content.xml`` (what the converter reads of one)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("content.xml", xml)
    return path


def test_opendocument_spreadsheet_cells_and_text_headings(tmp_path: Path) -> None:
    office = 'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
    text_ns = 'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
    table_ns = 'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
    sheet = content_xml(
        tmp_path / "plan.ods",
        f"<office:document-content {office} {text_ns} {table_ns}><office:body><office:spreadsheet>"
        '<table:table table:name="Plan"><table:table-row table:number-rows-repeated="2"/>'
        '<table:table-row><table:table-cell table:number-columns-repeated="1000000"/>'
        "</table:table-row><table:table-row><table:table-cell/>"
        "<table:table-cell><text:p>budget 42</text:p></table:table-cell></table:table-row>"
        "</table:table></office:spreadsheet></office:body></office:document-content>",
    )
    text, meta = only(sheet)
    # Three rows before it (two repeated empty ones, one of a million empty cells) only move the address.
    assert text == "[sheet Plan]\nrow 4: budget 42\n\n"
    assert ["cell", "Plan!B4"] in [p[1:] for p in meta["places"]]
    memo = content_xml(
        tmp_path / "memo.odt",
        f"<office:document-content {office} {text_ns}><office:body><office:text>"
        '<text:h text:outline-level="2">Plan</text:h><text:p>Ship<text:s text:c="2"/>it.</text:p>'
        "</office:text></office:body></office:document-content>",
    )
    text, _ = only(memo)
    assert text == "## Plan\nShip  it.\n"


def test_legacy_office_files_say_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600)
    (tmp_path / "new.txt").write_text("text")
    loaded = load(tmp_path / "old.doc", tmp_path / "new.txt")
    assert [(s.path, s.reason) for s in loaded.skipped] == [
        ("old.doc", "legacy Word (.doc) is not read; save it as .docx")
    ]
