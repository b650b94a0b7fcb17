"""Real EPUB, HTML, ODT, DOCX, PPTX and notebook files nobody on this project made, read whole and in order.

`.ci/setup_documents.sh` installs them: Debian manuals as EPUB and HTML (debmake-doc: DocBook;
developers-reference: Sphinx), officer's (an R package's) example Word and PowerPoint files (its templates
hold no text), nbsphinx's documentation notebooks, LibreOffice's own example ODT and a CV template of its
(an ``.ott``: the same package as an ``.odt``, read under that name). Each file is checked against a
reference reading made without our converters: the EPUB's spine read with the standard library, HTML
through ``html.parser``, an ODT's ``content.xml`` paragraphs and headings, python-docx's paragraphs and
table cells in the body's order, python-pptx's text frames and table cells, a notebook's cell sources.
The measure: of the reference's words, at least 99.5% stand in ours in the same order (difflib's longest
matching blocks; ours may add headings such as ``[chapter 3]`` or a notebook's outputs), the reference's
last word among them (nothing cut at the end), and no note on the conversion (nothing cut or unread).
Each test skips, naming the Debian package, when its file is absent.
"""

from __future__ import annotations

import difflib
import html.parser
import json
import os
import posixpath
import shutil
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from benchmarks.documents_bench import words
from rlm_adapters.files import load_paths

UNPACKED = Path(os.environ.get("RLM_REAL_DOCUMENTS", "/opt/rlm-real-documents"))
OFFICER = UNPACKED / "usr/lib/R/site-library/officer"
NBSPHINX = UNPACKED / "usr/share/doc/python-nbsphinx/html/_sources"
LIBREOFFICE = UNPACKED / "usr/lib/libreoffice/share/template/common"
_BLOCKS = {"p", "div", "br", "li", "tr", "td", "th", "table", "pre", "dt", "dd", "blockquote", "section", "hr"}
_BLOCKS |= {f"h{n}" for n in range(1, 7)}
_TEXT_NS = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"


class _HTMLText(html.parser.HTMLParser):
    """An HTML page's text: what is outside ``head``, ``script`` and ``style``, blocks apart, inline joined."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.hidden += tag in ("head", "script", "style")
        self.parts.append("\n" if tag in _BLOCKS else "")

    def handle_endtag(self, tag: str) -> None:
        self.hidden -= tag in ("head", "script", "style") and self.hidden > 0
        self.parts.append("\n" if tag in _BLOCKS else "")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def html_text(markup: bytes) -> str:
    reader = _HTMLText()
    reader.feed(markup.decode("utf-8"))
    reader.close()
    return "".join(reader.parts)


def epub_text(path: Path) -> str:
    opf = "{http://www.idpf.org/2007/opf}"
    with zipfile.ZipFile(path) as archive:
        container = ET.fromstring(archive.read("META-INF/container.xml"))
        rootfile = container.find(".//{urn:oasis:names:tc:opendocument:xmlns:container}rootfile")
        assert rootfile is not None
        package_path = str(rootfile.get("full-path"))
        package = ET.fromstring(archive.read(package_path))
        hrefs = {item.get("id"): str(item.get("href")) for item in package.iter(f"{opf}item")}
        spine = [hrefs[ref.get("idref")] for ref in package.iter(f"{opf}itemref")]
        base = posixpath.dirname(package_path)
        return "\n".join(html_text(archive.read(posixpath.join(base, href))) for href in spine)


def odt_text(path: Path) -> str:
    with zipfile.ZipFile(path) as archive:
        content = ET.fromstring(archive.read("content.xml"))
    blocks = (f"{{{_TEXT_NS}}}p", f"{{{_TEXT_NS}}}h")
    return "\n".join("".join(element.itertext()) for element in content.iter() if element.tag in blocks)


def docx_text(path: Path) -> str:
    docx = pytest.importorskip("docx", reason="needs python-docx (pip install 'rlm-adapters[documents]')")
    from docx.table import Table

    parts: list[str] = []
    for block in docx.Document(str(path)).iter_inner_content():
        if isinstance(block, Table):
            parts += [cell.text for row in block.rows for cell in row.cells]
        else:
            parts.append(block.text)
    return "\n".join(parts)


def pptx_text(path: Path) -> str:
    pptx = pytest.importorskip("pptx", reason="needs python-pptx (pip install 'rlm-adapters[documents]')")
    parts: list[str] = []
    for slide in pptx.Presentation(str(path)).slides:
        for shape in slide.shapes:
            if shape.has_text_frame:
                parts.append(shape.text_frame.text)
            if getattr(shape, "has_table", False):
                parts += [cell.text for row in shape.table.rows for cell in row.cells]
    return "\n".join(parts)


def notebook_text(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"] for cell in cells)


Reference = Callable[[Path], str]
FILES: dict[str, tuple[str, Path, Reference]] = {
    "debmake-doc.en.epub": ("debmake-doc", Path("/usr/share/doc/debmake-doc/debmake-doc.en.epub"), epub_text),
    "developers-reference.epub": (
        "developers-reference",
        Path("/usr/share/developers-reference/developers-reference.epub"),
        epub_text,
    ),
    "pkgs.html": (
        "developers-reference",
        Path("/usr/share/developers-reference/pkgs.html"),
        lambda p: html_text(p.read_bytes()),
    ),
    "best-pkging-practices.html": (
        "developers-reference",
        Path("/usr/share/developers-reference/best-pkging-practices.html"),
        lambda p: html_text(p.read_bytes()),
    ),
    "idxexample.odt": ("libreoffice-common", LIBREOFFICE / "internal/idxexample.odt", odt_text),
    "CV.ott": ("libreoffice-common", LIBREOFFICE / "personal/CV.ott", odt_text),
    "example.docx": ("r-cran-officer", OFFICER / "doc_examples/example.docx", docx_text),
    "example.pptx": ("r-cran-officer", OFFICER / "doc_examples/example.pptx", pptx_text),
    "code-cells.ipynb": ("python-nbsphinx-doc", NBSPHINX / "code-cells.ipynb", notebook_text),
    "executing-notebooks.ipynb": ("python-nbsphinx-doc", NBSPHINX / "executing-notebooks.ipynb", notebook_text),
}


def matched(reference: list[str], ours: list[str]) -> tuple[float, bool]:
    """Share of `reference`'s words that stand in `ours` in the same order, and whether its last word is one."""
    blocks = difflib.SequenceMatcher(None, reference, ours, autojunk=False).get_matching_blocks()
    share = sum(block.size for block in blocks) / max(len(reference), 1)
    return share, any(block.size and block.a + block.size == len(reference) for block in blocks)


@pytest.mark.parametrize("name", list(FILES))
@pytest.mark.slow
def test_a_real_document_reads_whole_and_in_order(name: str, tmp_path: Path) -> None:
    package, path, reference_of = FILES[name]
    if not path.exists():
        pytest.skip(f"needs the Debian package {package} (.ci/setup_documents.sh installs or unpacks it)")
    path = path.resolve()  # nbsphinx's sources are links to the notebooks beside them
    if path.suffix == ".ott":  # an OpenDocument template is an .odt package under another name
        path = Path(shutil.copyfile(path, tmp_path / f"{path.stem}.odt"))
    loaded = load_paths([str(path)], [path.parent])
    assert loaded.skipped == []
    (document,) = loaded.documents()
    assert not document["metadata"].get("notes"), document["metadata"]["notes"]
    reference, ours = words(reference_of(path)), words(document["text"])
    assert len(reference) >= 8
    share, last = matched(reference, ours)
    assert share >= 0.995, f"{100 * share:.2f}% of the reference's {len(reference):,} words, in order"
    assert last, f"the document's last words are missing: {reference[-6:]}"
