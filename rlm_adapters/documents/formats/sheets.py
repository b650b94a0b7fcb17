"""Excel (.xlsx, .xlsm), with openpyxl (read-only, cached values): a place per sheet and per cell.

Every stored cell is read: a read-only sheet would otherwise stop at the size its ``<dimension>`` element
declares, which writers often leave at ``A1`` (readxl's ``datasets.xlsx``: 4 of its 6,267 cells), so the
declared size is dropped (`reset_dimensions`) and the rows are read as the file stores them.

Each sheet is headed ``[sheet Name]``; each non-empty row is one line, ``row 12: a | b | c``. Every
non-empty cell starts a place labelled with its address (``Sheet1!B12``), so a cited span reads as a
range (``Sheet1!A3:D20``); past the places cap the rest of the workbook is cited by sheet.
"""

from __future__ import annotations

import datetime
import re
from typing import IO, TYPE_CHECKING, Any

import openpyxl
from openpyxl.utils import get_column_letter

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

SHEET_PLACES_KEPT = 1000  # places held back so that every later sheet can still start one
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def convert(handle: IO[bytes], out: TextOut) -> None:
    """Write every worksheet's non-empty rows."""
    out.open_zip(handle).close()
    handle.seek(0)
    book = openpyxl.load_workbook(handle, read_only=True, data_only=True)
    try:
        by_cell = True
        for sheet in book.worksheets:
            quoted = "'" + sheet.title.replace("'", "''") + "'"
            name = (sheet.title, sheet.title if _PLAIN_NAME.fullmatch(sheet.title) else quoted)
            out.place("sheet", sheet.title)
            out.line(f"[sheet {sheet.title}]")
            sheet.reset_dimensions()  # read to the last stored row and column, not to the declared size
            for number, row in enumerate(sheet.iter_rows(values_only=True), start=1):
                by_cell = _row(out, name, number, row, by_cell)
            out.line()
    finally:
        book.close()


def _row(out: TextOut, sheet: tuple[str, str], number: int, row: tuple[Any, ...], by_cell: bool) -> bool:
    """Write one row (nothing for an empty one); whether cells still get places.

    `sheet` is the sheet's title and its name as a cell address spells it (quoted when needed).
    """
    values = [_text(value) for value in row]
    while values and not values[-1]:
        values.pop()
    if not values:
        return by_cell
    first = next(index for index, value in enumerate(values) if value)
    for index, value in enumerate(values):
        if index:
            out.write(" | ")
        if index == 0 or (value and index != first):
            # The line's start belongs to its first cell, so a span that starts at "row 12:" names it.
            column = first if index == 0 else index
            by_cell = by_cell and _cell_place(out, sheet, f"{get_column_letter(column + 1)}{number}")
        if index == 0:
            out.write(f"row {number}: ")
        out.write(value)
    out.line()
    return by_cell


def _cell_place(out: TextOut, sheet: tuple[str, str], address: str) -> bool:
    """Start the cell's place, or (at the cap) go back to the sheet's and say so; whether cells go on."""
    if out.room() <= SHEET_PLACES_KEPT:
        out.note(f"more than {len(out.places):,} cells: the rest are cited by sheet")
        out.place("sheet", sheet[0])
        return False
    out.place("cell", f"{sheet[1]}!{address}")
    return True


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime) and value.time() == datetime.time():
        return value.date().isoformat()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return " ".join(str(value).split())
