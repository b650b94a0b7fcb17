"""Which files are documents, which converter reads each, and what it needs installed.

A name's extension picks the format (a compressed file's, ``.gz``, ``.bz2`` or ``.xz``, the format of the
name under it: ``notes.txt.gz`` is compressed text, ``report.pdf.gz`` a compressed PDF, both decompressed
behind the walls); the first bytes are then checked against the format's signature on
the host (a comparison of at most a few KiB, no parsing), so a file named ``.pdf`` holding an ELF binary
is skipped with that reason before any converter starts. The libraries a format needs are located with
`importlib.util.find_spec` (which finds a package without importing it): the host never imports them.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from rlm_adapters.core.adapter_kit import human_bytes
from rlm_adapters.documents._dependencies import dependency_folders
from rlm_adapters.errors import MissingExtraError

FORMATS_FOLDER = Path(__file__).resolve().parent / "formats"
SNIFF_BYTES = 1024
# Formats the converter does not read, with what to do instead (they are binary: skipped either way).
UNSUPPORTED = {
    ".doc": "legacy Word (.doc) is not read; save it as .docx",
    ".xls": "legacy Excel (.xls) is not read; save it as .xlsx",
    ".ppt": "legacy PowerPoint (.ppt) is not read; save it as .pptx",
}
# The compressions read behind the walls (the standard library's gzip, bz2 and lzma) and their first bytes.
COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}
_MAGIC = {"gzip": b"\x1f\x8b", "bzip2": b"BZh", "xz": b"\xfd7zXZ\x00"}
# A tar archive holds files of their own (names, sizes, formats); unpacked, the folder walk reads each one with
# its own caps, conversions and sources, which one document made of all of them could not keep.
_TARS = (".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tbz2", ".tar.xz", ".txz", ".tar")
TAR = "a tar archive is not read; unpack it (tar -xf) and pass the folder"
ZSTD = "zstd compression (.zst) is not read; decompress it (zstd -d) and pass the file"


@dataclass(frozen=True)
class Format:
    """One document format.

    Attributes:
        name: Its short name (``pdf``), in each document's metadata as ``format``.
        plural: How progress counts it (``PDFs``).
        module: The converter module's file name in ``formats/``.
        function: The function there that converts it.
        libraries: Top-level modules it imports (located, never imported, on the host).
        distributions: The installed distributions its libraries come from, whose folders and whose
            dependencies' folders (recursively) the converter gets; one not installed is done without
            (openpyxl parses with defusedxml when it is there).
        signature: What the file must start with (``zip``: a zip archive), or None for text formats.
        compression: How the file is compressed (``gzip``, ``bzip2``, ``xz``; decompressed behind the walls
            before the converter reads it), or None.
        optional: Top-level modules it imports when they are installed and does without otherwise (their
            folders come with `distributions`); a converter server imports them once, as it does `libraries`.
    """

    name: str
    plural: str
    module: str
    function: str = "convert"
    libraries: tuple[str, ...] = ()
    signature: str | None = None
    distributions: tuple[str, ...] = ()
    compression: str | None = None
    optional: tuple[str, ...] = ()

    @property
    def module_path(self) -> Path:
        """The converter module's file."""
        return FORMATS_FOLDER / self.module


_OOXML = "zip"
_OPENPYXL = ("openpyxl", "et_xmlfile")
_XLSX = ("openpyxl", "defusedxml")  # defusedxml: openpyxl's guard against XML entity attacks, used when installed
FORMATS: dict[str, Format] = {
    ".pdf": Format("pdf", "PDFs", "pdf.py", libraries=("pypdfium2", "pypdfium2_raw"), signature="%PDF-",
                   distributions=("pypdfium2",)),
    ".docx": Format("docx", "Word files", "word.py", libraries=("docx", "lxml", "typing_extensions"), signature=_OOXML,
                    distributions=("python-docx",)),
    ".pptx": Format(
        "pptx", "slide decks", "slides.py", libraries=("pptx", "lxml", "PIL", "xlsxwriter", "typing_extensions"),
        signature=_OOXML, distributions=("python-pptx",),
    ),
    ".xlsx": Format("xlsx", "workbooks", "sheets.py", libraries=_OPENPYXL, signature=_OOXML, distributions=_XLSX),
    ".xlsm": Format("xlsx", "workbooks", "sheets.py", libraries=_OPENPYXL, signature=_OOXML, distributions=_XLSX),
    ".ipynb": Format("ipynb", "notebooks", "notebook.py"),
    ".html": Format("html", "web pages", "markup.py"),
    ".htm": Format("html", "web pages", "markup.py"),
    ".xhtml": Format("html", "web pages", "markup.py"),
    ".epub": Format("epub", "e-books", "markup.py", "convert_epub", signature=_OOXML),
    ".odt": Format("odt", "OpenDocument files", "odf.py", signature=_OOXML),
    ".ods": Format("ods", "OpenDocument files", "odf.py", "convert_spreadsheet", signature=_OOXML),
    ".odp": Format("odp", "OpenDocument files", "odf.py", "convert_presentation", signature=_OOXML),
    ".rtf": Format("rtf", "RTF files", "rtf.py", libraries=("striprtf",), signature="{\\rtf",
                   distributions=("striprtf",)),
}  # fmt: skip
# Text that is not UTF-8, or compressed: decoded behind the walls, where its encoding is detected (with
# charset-normalizer when it is installed; the converter says which encoding it used).
TEXT = Format("text", "text files", "plain.py", distributions=("charset-normalizer",), optional=("charset_normalizer",))


def format_of(name: str) -> Format | None:
    """The document format a file name's extension names, or None for any other file (read as text).

    A compressed file (``.gz``, ``.bz2``, ``.xz``) is the format of the name under its extension, compressed:
    `TEXT` when that name is no document's. None for one `unsupported_reason` refuses (a tar archive).
    """
    stem, extension = os.path.splitext(name)
    compression = COMPRESSIONS.get(extension.lower())
    if compression is None:
        return FORMATS.get(extension.lower())
    if unsupported_reason(name) is not None:
        return None
    inner = FORMATS.get(os.path.splitext(stem)[1].lower(), TEXT)
    return dataclasses.replace(inner, plural=f"compressed {inner.plural}", compression=compression)


def unsupported_reason(name: str) -> str | None:
    """Why a file of this name is not converted (a legacy Office file, a tar archive, a file compressed twice
    or with zstd), with the way out, or None."""
    lowered = name.lower()
    if lowered.endswith(_TARS):
        return TAR
    if lowered.endswith(".zst"):
        return ZSTD
    stem, extension = os.path.splitext(lowered)
    if extension in COMPRESSIONS:
        inner = os.path.splitext(stem)[1]
        if inner in COMPRESSIONS or inner == ".zst":
            return f"compressed twice ({inner}{extension}) is not read; decompress it once and pass the file"
        if inner in UNSUPPORTED:
            return UNSUPPORTED[inner]
        return None
    return UNSUPPORTED.get(extension)


def signature_problem(fmt: Format, head: bytes) -> str | None:
    """Why the first bytes of a file are not of its format (quoted, escaped), or None when they are (a
    compressed file's: of its compression; what it holds is checked once decompressed, behind the walls)."""
    if fmt.compression is not None:
        magic = _MAGIC[fmt.compression]
        if head.startswith(magic):
            return None
        return f"not {fmt.compression} data: it should start with {magic!r} but begins with {head[:8]!r}"
    if fmt.signature is None:
        return None
    if fmt.signature == _OOXML:
        if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
            return None
        wanted = "a zip archive"
    else:
        marker = fmt.signature.encode("ascii")
        # A PDF's header may follow some bytes of junk (viewers accept up to 1 KiB of it).
        if (head.find(marker) >= 0) if fmt.name == "pdf" else head.lstrip().startswith(marker):
            return None
        wanted = f"{fmt.signature!r}"
    return f"not a {fmt.name.upper()} file: it should start with {wanted} but begins with {head[:8]!r}"


def library_paths(fmt: Format) -> list[str] | str:
    """The folders holding `fmt`'s libraries and every installed dependency of theirs (what the converter puts
    on its path and its sandbox binds read-only), or what is missing."""
    folders: list[str] = []
    for module in fmt.libraries:
        entry = _path_entry(module)
        if entry is None:
            # The words of every missing extra, as a skipped entry: the load goes on with the other files.
            return str(MissingExtraError(f"reading a {fmt.name.upper()} file", "documents", module))
        folders.append(entry)
    # A dependency may sit in another folder than its library (a venv over the system's packages).
    return list(dict.fromkeys([*folders, *dependency_folders(fmt.distributions)]))


def _path_entry(module: str) -> str | None:
    """The ``sys.path`` folder `module` is found in (located, not imported), or None when it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    # A package's folder sits in its sys.path entry; a lone module's file does.
    return str(origin.parent.parent if origin.name == "__init__.py" else origin.parent)


def over_size(fmt: Format, size: int, cap: int) -> str | None:
    """Why a document is too large to convert (before anything reads it), or None."""
    if size <= cap:
        return None
    return (
        f"a {human_bytes(size)} {fmt.name.upper()} file, over the cap of {human_bytes(cap)} for one document "
        "(max_document_bytes); convert it yourself or raise the cap"
    )
