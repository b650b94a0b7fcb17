"""Real documents made by real writers at test time, and hostile ones made byte by byte.

The writers are the libraries' own (fpdf2, python-docx, python-pptx, openpyxl, nbformat; the ``dev``
extra); the hostile files (a zip bomb, billion laughs, a million PDF objects, a looping page tree, an array
nested a million deep, a PDF slow to read, an ELF named .pdf, a notebook with a 200 MB output) are written
byte by byte or in pieces, so making them costs the test little memory.
"""

from __future__ import annotations

import array
import importlib.util
import json
import re
import shutil
import struct
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

PAGES = 9
PLANTED_PAGE = 7
PLANTED_LINE = 4  # the secret's line inside its page (each line is short: none wraps)
LINES_PER_PAGE = 6
SECRET = "The vault combination is 8812-BRAVO."


def needs_reader(module: str, what: str) -> None:
    """Skip, naming the extra, when the library the converter reads `what` with is not installed (located
    only: the test process need not import it either)."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f'needs {module} to read {what} (pip install "rlm-adapters[documents]")')


def pdf(path: Path, pages: int = PAGES, secret_page: int | None = PLANTED_PAGE, password: str | None = None) -> Path:
    """A PDF of `pages` pages of `LINES_PER_PAGE` lines of filler, with `SECRET` as line `PLANTED_LINE` of
    `secret_page`."""
    fpdf = pytest.importorskip("fpdf", reason="needs fpdf2 (the dev extra) to write PDFs")
    needs_reader("pypdfium2", "PDFs")
    document = fpdf.FPDF()
    document.set_font("Helvetica", size=11)
    for number in range(1, pages + 1):
        document.add_page()
        lines = [f"Section {number}.{n}. The quarterly report continues." for n in range(1, LINES_PER_PAGE + 1)]
        if number == secret_page:
            lines[PLANTED_LINE - 1] = SECRET
        document.multi_cell(0, 6, "\n".join(lines))
    if password is not None:
        from fpdf.enums import EncryptionMethod

        document.set_encryption(owner_password="owner", user_password=password, encryption_method=EncryptionMethod.RC4)
    document.output(str(path))
    return path


def docx(path: Path) -> Path:
    """A Word file: a title, a heading, paragraphs, a table, and a hard page break before its last paragraph."""
    module = pytest.importorskip("docx", reason="needs python-docx to write .docx files")
    document = module.Document()
    document.add_heading("Service agreement", 0)
    document.add_heading("Fees", 1)
    document.add_paragraph("The monthly fee is 1,250 euros, due on the first working day.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Term", "Value"
    table.cell(1, 0).text, table.cell(1, 1).text = "Notice", "90 days"
    document.add_page_break()
    document.add_paragraph("Either party may end the agreement in writing.")
    document.save(str(path))
    return path


def pptx(path: Path, slides: int = 5) -> Path:
    """A deck of `slides` slides with titles, bullets and speaker notes; slide 4 names the launch date."""
    module = pytest.importorskip("pptx", reason="needs python-pptx to write .pptx files")
    deck = module.Presentation()
    for number in range(1, slides + 1):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Roadmap part {number}"
        slide.placeholders[1].text = "Launch is on 14 March." if number == 4 else f"Milestone {number} is on track."
        slide.notes_slide.notes_text_frame.text = f"Speaker note {number}"
    deck.save(str(path))
    return path


def xlsx(path: Path) -> Path:
    """A workbook: ``Sheet1`` with a 20 x 4 table (row r, column c holds r * c), and ``Q3 Sales`` with one cell."""
    module = pytest.importorskip("openpyxl", reason="needs openpyxl to write .xlsx files")
    book = module.Workbook()
    sheet = book.active
    sheet.title = "Sheet1"
    for row in range(1, 21):
        for column in range(1, 5):
            sheet.cell(row, column, row * column)
    other = book.create_sheet("Q3 Sales")
    other["C5"] = "North region total 7731"
    book.save(str(path))
    return path


def ipynb(path: Path, cells: int = 8) -> Path:
    """A notebook of `cells` cells; cell 7 prints the answer."""
    nbformat = pytest.importorskip("nbformat", reason="needs nbformat to write notebooks")
    notebook = nbformat.v4.new_notebook()
    for number in range(1, cells + 1):
        if number == 7:
            output = nbformat.v4.new_output("stream", text="accuracy: 0.9731\n")
            notebook.cells.append(nbformat.v4.new_code_cell("print(evaluate(model))", outputs=[output]))
        elif number % 2:
            notebook.cells.append(nbformat.v4.new_markdown_cell(f"## Step {number}"))
        else:
            notebook.cells.append(nbformat.v4.new_code_cell(f"x{number} = {number}"))
    nbformat.write(notebook, str(path))
    return path


# ------------------------------------------------------------------------------------------- hostile
def zip_bomb_docx(path: Path, expanded: int = 600 * 1024**2) -> Path:
    """A real .docx plus one member of `expanded` zero bytes: a few hundred KiB on disk."""
    docx(path.with_suffix(".plain.docx"))
    zeros = b"\x00" * (1 << 20)
    with (
        zipfile.ZipFile(path.with_suffix(".plain.docx")) as source,
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as bomb,
    ):
        for member in source.infolist():
            bomb.writestr(member, source.read(member))
        with bomb.open("word/media/image1.bin", "w", force_zip64=True) as out:
            for _ in range(expanded // len(zeros)):
                out.write(zeros)
    path.with_suffix(".plain.docx").unlink()
    return path


def _raw_pdf(path: Path, objects: Iterable[bytes], root: int) -> Path:
    """A PDF from numbered object bodies (object i + 1 is the i-th), with a correct xref table, written as it goes."""
    with path.open("wb") as out:
        out.write(b"%PDF-1.7\n")
        offsets = array.array("Q")
        for number, body in enumerate(objects, start=1):
            offsets.append(out.tell())
            out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
        xref = out.tell()
        out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(offsets) + 1))
        for offset in offsets:
            out.write(b"%010d 00000 n \n" % offset)
        out.write(b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(offsets) + 1, root, xref))
    return path


def million_objects_pdf(path: Path, count: int = 1_000_000) -> Path:
    """A PDF whose page tree holds a million tiny page objects."""

    def objects() -> Iterator[bytes]:
        yield b"<< /Type /Catalog /Pages 2 0 R >>"
        yield b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (n + 3) for n in range(count)), count)
        for _ in range(count):
            yield b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 9 9] >>"

    return _raw_pdf(path, objects(), 1)


def looping_pdf(path: Path) -> Path:
    """A PDF whose page tree contains itself (its Pages node lists itself as a kid)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
        b"<< /Type /Pages /Kids [2 0 R] /Parent 2 0 R /Count 1 >>",
    ]
    return _raw_pdf(path, objects, 1)


def elf_named_pdf(path: Path) -> Path:
    """A real ELF binary (the ``true`` program) under a ``.pdf`` name."""
    binary = shutil.which("true") or "/bin/true"
    shutil.copyfile(binary, path)
    return path


def huge_output_notebook(path: Path, output_bytes: int = 200 * 1024**2) -> Path:
    """A valid notebook whose one output is `output_bytes` characters long, written in pieces."""
    head = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}}
    chunk = "0123456789abcdef" * 65536
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(head)[:-1])
        out.write(', "cells": [{"cell_type": "code", "metadata": {}, "execution_count": 1, "source": "dump()", ')
        out.write('"outputs": [{"output_type": "stream", "name": "stdout", "text": "')
        for _ in range(output_bytes // len(chunk)):
            out.write(chunk)
        out.write('"}]}]}')
    return path


# Nine levels of ten: "&lol9;" names a billion "lol"s (3 GB) written in a few hundred bytes.
LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lolz [\n<!ENTITY lol0 "lol">\n'
    + "".join(f'<!ENTITY lol{level} "{f"&lol{level - 1};" * 10}">\n' for level in range(1, 10))
    + "]>\n"
)
_WORD = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_SHEET = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'


def _replace_member(source: Path, target: Path, member: str, xml: str) -> Path:
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in original.infolist():
            out.writestr(info, xml if info.filename == member else original.read(info))
    source.unlink()
    return target


def billion_laughs_docx(path: Path) -> Path:
    """A real .docx whose body is one paragraph of ``&lol9;``, the billion-laughs entity."""
    body = f"<w:document {_WORD}><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>"
    return _replace_member(docx(path.with_suffix(".plain.docx")), path, "word/document.xml", LAUGHS + body)


def billion_laughs_xlsx(path: Path) -> Path:
    """A real .xlsx whose first sheet's one cell holds ``&lol9;``."""
    sheet = (
        f'<worksheet {_SHEET}><sheetData><row r="1"><c r="A1" t="inlineStr"><is><t>&lol9;</t></is></c></row>'
        "</sheetData></worksheet>"
    )
    return _replace_member(xlsx(path.with_suffix(".plain.xlsx")), path, "xl/worksheets/sheet1.xml", LAUGHS + sheet)


def deeply_nested_pdf(path: Path, depth: int = 1_000_000) -> Path:
    """A PDF whose one page holds an array nested `depth` deep (``[[[[...]]]]``): a recursive parser's stack."""
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 9 9] /Deep " + b"[" * depth + b"]" * depth + b" >>"
    return _raw_pdf(path, [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>", page], 1)


def slow_pdf(path: Path, pages: int = 40, operators: int = 300_000) -> Path:
    """A PDF of 20 KB that takes a pure-Python text extractor minutes: `pages` pages sharing one compressed
    content stream of `operators` text-showing operators (each within the library's own per-stream limits)."""
    stream = zlib.compress(b"BT /F1 1 Tf " + b"(x) Tj " * operators + b"ET", 9)
    kids = b" ".join(b"%d 0 R" % (number + 5) for number in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream),
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 99 99] /Resources << /Font << /F1 3 0 R >> >> "
    page += b"/Contents 4 0 R >>"
    return _raw_pdf(path, [*objects, *[page] * pages], 1)


def lying_zip_bomb_docx(path: Path, declared: int = 1000) -> Path:
    """`zip_bomb_docx` with its big member's headers saying it holds `declared` bytes, so that no check of
    the declared sizes sees the bomb: what reads it must stop where the headers say."""
    zip_bomb_docx(path)
    data = bytearray(path.read_bytes())
    name = b"word/media/image1.bin"
    # The local header (the name at offset 30, the size at 22) and the central one (46 and 24).
    for signature, name_at, size_at in ((b"PK\x03\x04", 30, 22), (b"PK\x01\x02", 46, 24)):
        start = data.find(signature)
        while data[start + name_at : start + name_at + len(name)] != name:
            start = data.find(signature, start + 1)
        struct.pack_into("<I", data, start + size_at, declared)
    path.write_bytes(bytes(data))
    return path


def understated_dimension_xlsx(path: Path) -> Path:
    """`xlsx`, its first sheet declaring ``<dimension ref="A1"/>`` over its 20 x 4 cells (as readxl's
    ``datasets.xlsx`` and other writers do)."""
    plain = xlsx(path.with_suffix(".plain.xlsx"))
    with zipfile.ZipFile(plain) as original:
        sheet = original.read("xl/worksheets/sheet1.xml").decode()
    understated = re.sub(r'<dimension ref="[^"]*"\s*/>', '<dimension ref="A1"/>', sheet)
    assert understated != sheet, "openpyxl wrote no <dimension> to understate"
    return _replace_member(plain, path, "xl/worksheets/sheet1.xml", understated)


def count_conversions(monkeypatch: Any) -> list[Path]:
    """Each document a converter was handed (its private copy), whether by a batch's converter server or by a
    one-off converter; the conversions still run. `monkeypatch` is pytest's fixture."""
    from rlm_adapters.core.sandbox.subprocess import oneshot

    seen: list[Path] = []
    one_off, served = oneshot.run_walled, oneshot.WalledServer.run

    def counted_one_off(program: Path, request: Any, document: Path, *args: Any, **kwargs: Any) -> Any:
        seen.append(document)
        return one_off(program, request, document, *args, **kwargs)

    def counted_served(server: Any, request: Any, document: Path, *args: Any, **kwargs: Any) -> Any:
        seen.append(document)
        return served(server, request, document, *args, **kwargs)

    monkeypatch.setattr(oneshot, "run_walled", counted_one_off)
    monkeypatch.setattr(oneshot.WalledServer, "run", counted_served)
    return seen
