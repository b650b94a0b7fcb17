"""Lines inside a converted document's page, slide or notebook cell (`Place.line_start`), and where none are given."""

from __future__ import annotations

from typing import Any

from rlm_adapters.core.events import CellExecuted
from rlm_adapters.sources import Place, Source, SourceTracker, sources_block
from rlm_adapters.sources._documents import Document

FILLER = "Routine figures of the quarter continue here without change"


def _pages(count: int, fact: tuple[int, int, str]) -> tuple[str, list[list[Any]]]:
    """`count` pages headed ``[page N]`` as the PDF converter writes them, five lines each, with `fact` (page,
    line inside the page from 1, text) in place of one line; and their place map."""
    text, places = "", []
    for page in range(1, count + 1):
        places.append([len(text), "page", str(page)])
        lines = [f"{FILLER} {page}.{n}." for n in range(1, 6)]
        if page == fact[0]:
            lines[fact[1] - 1] = fact[2]
        text += f"[page {page}]\n" + "\n".join(lines) + "\n"
    return text, places


def _cited(document: dict[str, Any], output: str, answer: str) -> list[Source]:
    tracker = SourceTracker([document])
    tracker.on_event(CellExecuted(run_id="r", iteration=1, index=1, code="", output=output, error=None, duration=0.0))
    return tracker.findings(answer).sources


def test_a_fact_on_page_seven_line_three_is_cited_with_its_line_in_every_form() -> None:
    text, places = _pages(9, (7, 3, "The vault combination is 8812-BRAVO."))
    document = {"id": "q3.pdf", "text": text, "metadata": {"path": "q3.pdf", "places": places}}
    (source,) = _cited(document, text, "The vault combination is 8812-BRAVO.")
    assert source.location == "q3.pdf:p7:L3"
    assert source.place == Place("page", "7", None, 3, 3)
    # The whole text's lines stay as they were: page 7's heading is line 37, so its third line is line 40.
    assert (source.line_start, source.line_end) == (40, 40)
    assert source.to_dict()["place"] == {"kind": "page", "start": "7", "end": None, "line_start": 3, "line_end": 3}
    assert sources_block([source]) == "Sources:\n- q3.pdf:p7:L3"


def test_lines_inside_a_place_are_a_range_and_a_heading_is_not_one_of_them() -> None:
    text = "[slide 1]\nintro\n[slide 2]\nfirst\nsecond\nthird\n"
    document = Document("deck.pptx", text, [(0, "slide", "1"), (16, "slide", "2")])
    first = document.text.index("first")
    third_end = document.text.index("third") + len("third")
    assert str(document.place_of(first, third_end)) == "slide 2:L1-3"
    # A span from the heading on starts at the place's line 1; the heading alone has no line inside.
    assert str(document.place_of(16, third_end)) == "slide 2:L1-3"
    assert document.place_of(16, 25) == Place("slide", "2")
    # A span across two places names both and no lines (which page would they count in?).
    assert document.place_of(10, third_end) == Place("slide", "1", "2")


def test_a_notebook_cell_gets_lines_and_a_spreadsheet_keeps_its_cell_range() -> None:
    notebook = "[cell 1: markdown]\n# Setup\n[cell 2: code, In [1]]\nimport math\nrate = 0.0425\n"
    cells = Document("notes.ipynb", notebook, [(0, "cell", "cell 1"), (27, "cell", "cell 2")])
    rate = notebook.index("rate")
    assert str(cells.place_of(rate, rate + 13)) == "cell 2:L2"
    sheet = "[sheet Q3]\nrow 1: region | total\nrow 2: north | 4250\n"
    row = sheet.index("row 2")
    book = Document("book.xlsx", sheet, [(0, "sheet", "Q3"), (11, "cell", "Q3!A1"), (row, "cell", "Q3!A2"),
                                         (row + 14, "cell", "Q3!B2")])  # fmt: skip
    assert str(book.place_of(row, len(sheet) - 1)) == "Q3!A2:B2"
    assert book.place_of(row, row + 5) == Place("cell", "Q3!A2")  # a cell is its own coordinate: no lines
    assert book.place_of(0, 5) == Place("sheet", "Q3")


def test_a_page_without_a_heading_counts_from_its_first_line() -> None:
    # A Word file's page break starts a page mid-text, with no heading line: line 1 is the page's first.
    text = "Intro paragraph.\nSecond page opens.\nIt names the fee.\n"
    document = Document("terms.docx", text, [(0, "page", "1"), (17, "page", "2")])
    fee = text.index("It names")
    assert str(document.place_of(fee, fee + 5)) == "p2:L2"
    # A paragraph that only looks like a heading of another page does not count as this page's heading.
    lookalike = Document("t.docx", "x\n[page 20] notes\nfee\n", [(0, "page", "1"), (2, "page", "2")])
    assert str(lookalike.place_of(18, 21)) == "p2:L2"


def test_a_hostile_place_map_cannot_make_lines_out_of_nothing() -> None:
    # Places past the text's end, labels with brackets: what comes out is still lines of this text, from 1.
    text = "[page 1]\nonly line\n"
    document = Document("x.pdf", text, [(0, "page", "1"), (10_000, "page", "2]\n[page 3")])
    place = document.place_of(9, 18)
    assert place == Place("page", "1", None, 1, 1)
    assert document.place_of(9_990, 10_005) == Place("page", "1", "2]\n[page 3")
