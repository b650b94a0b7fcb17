"""HTML and EPUB, standard library only: text with headings, list items and table rows on their own lines.

An EPUB is read in its spine's order (the reading order its package file declares), each chapter headed
``[chapter N]``; its archive is checked for a zip bomb before any member is read.
"""

from __future__ import annotations

import posixpath
import xml.etree.ElementTree as ET
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rlm_adapters.documents.formats._text import TextOut

_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"


def convert(handle: IO[bytes], out: TextOut) -> None:
    """HTML: the page's text."""
    out.html(out.decode(handle.read()))


def convert_epub(handle: IO[bytes], out: TextOut) -> None:
    """EPUB: each spine item's text, in reading order."""
    archive = out.open_zip(handle)
    try:
        container = ET.fromstring(archive.read("META-INF/container.xml"))
        rootfile = container.find(f".//{_CONTAINER}rootfile")
        if rootfile is None or not rootfile.get("full-path"):
            out.refuse("malformed EPUB: META-INF/container.xml names no package file")
        package_path = str(rootfile.get("full-path"))
        package = ET.fromstring(archive.read(package_path))
    except (KeyError, ET.ParseError) as exc:
        out.refuse(f"malformed EPUB: {exc}")
    base = posixpath.dirname(package_path)
    manifest = {
        item.get("id"): item.get("href") for item in package.iter(f"{_OPF}item") if item.get("id") and item.get("href")
    }
    number = 0
    for itemref in package.iter(f"{_OPF}itemref"):
        href = manifest.get(itemref.get("idref"))
        if href is None:
            continue
        try:
            markup = archive.read(posixpath.normpath(posixpath.join(base, href)))
        except KeyError:
            out.note(f"a chapter the spine names is missing: {href[:80]}")
            continue
        number += 1
        out.line(f"[chapter {number}]")
        out.html(out.decode(markup))
