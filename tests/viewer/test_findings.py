"""viewer/findings.py: a sources record's lines inside a page are shown, and a hostile record's are not trusted."""

from __future__ import annotations

from typing import Any

from rlm_adapters.viewer.findings import findings_of


def _record(place: Any) -> dict[str, Any]:
    return {"sources": [{"path": "q3.pdf", "line_start": 40, "line_end": 41, "place": place}]}


def test_lines_inside_a_page_are_shown_as_the_sources_block_shows_them() -> None:
    place = {"kind": "page", "start": "7", "end": None, "line_start": 3, "line_end": 4}
    assert findings_of(_record(place)).sources == ["q3.pdf:p7:L3-4"]
    # A record written before places had lines names the page only.
    assert findings_of(_record({"kind": "page", "start": "7", "end": None})).sources == ["q3.pdf:p7"]


def test_a_hostile_records_line_numbers_are_dropped_not_shown() -> None:
    for first, last in ((True, 2), (1e308, 2), (-3, 2), ("3", 4), (10**30, 10**30)):
        place = {"kind": "page", "start": "7", "line_start": first, "line_end": last}
        assert findings_of(_record(place)).sources == ["q3.pdf:p7"], (first, last)
    # An end before the start is no range: the start alone is shown.
    place = {"kind": "page", "start": "7", "line_start": 5, "line_end": 2}
    assert findings_of(_record(place)).sources == ["q3.pdf:p7:L5"]


def test_a_span_of_a_long_line_shows_its_characters_and_a_hostile_range_is_dropped() -> None:
    source = {"path": "big.txt", "line_start": 1, "line_end": 1, "char_start": 1_204_000, "char_end": 1_204_500}
    assert findings_of({"sources": [source]}).sources == ["big.txt:1 chars 1,204,000-1,204,500"]
    for start, end in ((True, 3), (-1, 3), ("1", 3), (1e308, 2.0), (10**30, 10**30 + 1)):
        hostile = {**source, "char_start": start, "char_end": end}
        assert findings_of({"sources": [hostile]}).sources == ["big.txt:1"], (start, end)
