"""Compressed files (.gz, .bz2, .xz) are decompressed behind the walls and read as what they hold (issue 51, item 4).

Until then each was "skipped: binary file". The files here are made by the test (a text with a planted fact,
a PDF by fpdf2, bombs written a chunk at a time), and one is a real file nobody here made: a Debian package's
``changelog.Debian.gz``.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import tarfile
from pathlib import Path

import pytest

from rlm_adapters.documents import TEXT as TEXT_FORMAT
from rlm_adapters.documents import DocumentLimits, format_of, unsupported_reason
from rlm_adapters.files import LoadResult, load_paths
from tests.documents import writers

PLANTED = "The harbour master's password is TEAL-4471."
LINES = [f"{n:05d} routine entry of the ship's log, nothing to see" for n in range(2000)]
LINES[1234] = PLANTED
TEXT = "\n".join(LINES) + "\n"
MODULES = {".gz": gzip, ".bz2": bz2, ".xz": lzma}
COMPRESSIONS = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz"}
DEBIAN_CHANGELOG = "/usr/share/doc/bash/changelog.Debian.gz"


def compressed(path: Path, data: bytes, *, repeat: int = 1) -> Path:
    """`data` (`repeat` times over, written a chunk at a time) compressed as `path`'s extension says."""
    with MODULES[path.suffix].open(path, "wb") as handle:
        for _ in range(repeat):
            handle.write(data)
    return path


def load(folder: Path, limits: DocumentLimits | None = None) -> tuple[LoadResult, dict[str, str]]:
    loaded = load_paths(["."], [folder], base=folder, documents=limits)
    return loaded, {skipped.path: skipped.reason for skipped in loaded.skipped}


@pytest.mark.parametrize("extension", [".gz", ".bz2", ".xz"])
def test_compressed_text_is_read_whole(tmp_path: Path, extension: str) -> None:
    compressed(tmp_path / f"ship.log{extension}", TEXT.encode())
    loaded, skipped = load(tmp_path)
    assert skipped == {}
    (file,) = loaded.files
    assert file.text == TEXT and PLANTED in file.text
    assert file.format == "text" and not file.invalid_utf8
    assert file.metadata["compression"] == COMPRESSIONS[extension]
    assert file.metadata["raw_size"] == (tmp_path / f"ship.log{extension}").stat().st_size
    assert "notes" not in file.metadata


def test_a_compressed_pdf_keeps_its_pages(tmp_path: Path) -> None:
    pdf = writers.pdf(tmp_path / "report.pdf")
    compressed(tmp_path / "report.pdf.gz", pdf.read_bytes())
    pdf.unlink()
    loaded, skipped = load(tmp_path)
    assert skipped == {}
    (file,) = loaded.files
    assert file.format == "pdf" and file.metadata["compression"] == "gzip"
    start, end = file.metadata["pages"][writers.PLANTED_PAGE - 1]
    assert writers.SECRET in file.text[start:end]


def test_the_compressed_names(tmp_path: Path) -> None:
    text, pdf = format_of("notes.txt.GZ"), format_of("report.pdf.xz")
    assert text is not None and (text.name, text.compression, text.plural) == ("text", "gzip", "compressed text files")
    assert pdf is not None and (pdf.name, pdf.compression) == ("pdf", "xz")
    assert format_of("README.bz2") is not None  # no extension under it: text
    for name in (
        "src.tar.gz",
        "src.tgz",
        "src.tar.xz",
        "src.tar.bz2",
        "notes.txt.zst",
        "notes.txt.gz.gz",
        "old.doc.gz",
    ):
        assert format_of(name) is None and unsupported_reason(name) is not None, name


def test_a_tar_archive_the_zstd_format_and_twice_compressed_files_are_named(tmp_path: Path) -> None:
    member = tmp_path / "member.txt"
    member.write_text("inside\n")
    with tarfile.open(tmp_path / "src.tar.gz", "w:gz") as archive:
        archive.add(member, "member.txt")
    # A tar archive compressed under a name that does not say so is found once decompressed.
    tarred = io.BytesIO()
    with tarfile.open(fileobj=tarred, mode="w") as archive:
        archive.add(member, "member.txt")
    member.unlink()
    compressed(tmp_path / "backup.gz", tarred.getvalue())
    (tmp_path / "notes.txt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + bytes(64))
    compressed(tmp_path / "twice.txt.gz.gz", gzip.compress(b"text\n"))
    (tmp_path / "keep.txt").write_text("kept\n")
    loaded, skipped = load(tmp_path)
    assert [f.path for f in loaded.files] == ["keep.txt"]
    assert skipped["src.tar.gz"] == "a tar archive is not read; unpack it (tar -xf) and pass the folder"
    assert skipped["backup.gz"] == "a tar archive is not read; unpack it (tar -xf) and pass the folder"
    assert skipped["notes.txt.zst"].startswith("zstd compression (.zst) is not read; decompress it (zstd -d)")
    assert skipped["twice.txt.gz.gz"].startswith("compressed twice (.gz.gz) is not read")


def test_what_is_not_compressed_text_is_named(tmp_path: Path) -> None:
    (tmp_path / "plain.txt.gz").write_text("not compressed at all\n")
    (tmp_path / "cut.txt.gz").write_bytes(gzip.compress(TEXT.encode())[:300])
    compressed(tmp_path / "program.gz", b"\x7fELF\x02\x01\x01\x00" + bytes(4000))
    compressed(tmp_path / "noise.bz2", bytes(range(1, 256)) * 40)
    (tmp_path / "keep.txt").write_text("kept\n")
    _, skipped = load(tmp_path)
    assert skipped["plain.txt.gz"] == "not gzip data: it should start with b'\\x1f\\x8b' but begins with b'not comp'"
    assert skipped["cut.txt.gz"].startswith("malformed gzip data: Compressed file ended before the end-of-stream")
    assert skipped["program.gz"] == "binary data, not text (it holds NUL bytes)"
    assert skipped["noise.bz2"] == "binary data, not text (no text encoding fits it)"


def test_a_bomb_is_stopped_at_the_ratio_and_named(tmp_path: Path) -> None:
    # 8 MiB of one letter: gzip packs it about a thousand times, bzip2 and xz far more; text, so no other
    # check (binary data, the text cap) stops it first.
    for extension in (".gz", ".bz2", ".xz"):
        compressed(tmp_path / f"bomb{extension}", b"A" * (1 << 20), repeat=8)
    (tmp_path / "keep.txt").write_text("kept\n")
    loaded, skipped = load(tmp_path)
    assert [f.path for f in loaded.files] == ["keep.txt"]
    for extension, kind in COMPRESSIONS.items():
        reason = skipped[f"bomb{extension}"]
        assert reason.startswith("a decompression bomb? its "), reason
        assert f"{kind} bytes expand past" in reason
        assert "over the cap of 200 times their size (DocumentLimits.expansion_ratio); raise it in Python" in reason


def test_the_output_cap_stops_a_file_that_expands_past_it_and_a_raised_cap_reads_it(tmp_path: Path) -> None:
    compressed(tmp_path / "big.txt.gz", TEXT.encode(), repeat=40)  # 4.5 MB of text, a modest ratio
    (tmp_path / "keep.txt").write_text("kept\n")
    _, skipped = load(tmp_path, DocumentLimits(expanded_bytes=2 * 1024**2))
    assert skipped["big.txt.gz"].endswith(
        "bytes expand past the cap of 2,097,152 bytes (DocumentLimits.expanded_bytes); raise it in Python, "
        "or decompress the file yourself"
    )
    loaded, skipped = load(tmp_path, DocumentLimits(expanded_bytes=8 * 1024**2))
    assert skipped == {} and next(f for f in loaded.files if f.path == "big.txt.gz").text == TEXT * 40


def test_a_small_file_that_packs_well_is_read(tmp_path: Path) -> None:
    compressed(tmp_path / "blank.log.xz", b"=" * 900_000 + b"\nend\n")  # past 200 times, below the grace
    loaded, _ = load(tmp_path)
    assert loaded.files[0].text.endswith("=\nend\n")


def test_a_real_debian_changelog_reads_as_gzip_reads_it(tmp_path: Path) -> None:
    real = Path(DEBIAN_CHANGELOG)
    if not real.is_file():
        pytest.skip(f"needs Debian's bash package ({DEBIAN_CHANGELOG}: a file nobody here made)")
    (tmp_path / "bash").mkdir()
    (tmp_path / "bash" / real.name).write_bytes(real.read_bytes())
    loaded, skipped = load(tmp_path)
    assert skipped == {}
    (file,) = loaded.files
    assert file.path == "bash/changelog.Debian.gz" and file.metadata["compression"] == "gzip"
    assert file.text == gzip.decompress(real.read_bytes()).decode("utf-8")
    assert file.text.startswith("bash (")  # "bash (5.2.15-2) unstable; urgency=medium"


def test_text_may_be_longer_than_a_documents_text_cap_up_to_a_fifth_of_the_memory(tmp_path: Path) -> None:
    """A rotated log gzipped to 10 MB often holds 100: text is not held to ``text_bytes`` (64 MiB by default)
    but to a fifth of the converter's memory, which decoding it needs at most."""
    limits = DocumentLimits(text_bytes=1024**2)
    widened = limits.for_format(TEXT_FORMAT)
    assert widened.text_bytes == widened.max_document_bytes == limits.memory_bytes // 5
    pdf = format_of("r.pdf.gz")
    assert pdf is not None and limits.for_format(pdf) == limits  # a document keeps its caps
    compressed(tmp_path / "app.log.gz", TEXT.encode(), repeat=30)  # 3.4 MB of text
    loaded, skipped = load(tmp_path, limits)
    assert skipped == {} and loaded.files[0].text == TEXT * 30


def test_what_a_compressed_document_holds_meets_its_formats_own_guards(tmp_path: Path) -> None:
    bomb = writers.zip_bomb_docx(tmp_path / "bomb.docx")
    compressed(tmp_path / "bomb.docx.gz", bomb.read_bytes())
    elf = writers.elf_named_pdf(tmp_path / "elf.pdf")
    compressed(tmp_path / "elf.pdf.xz", elf.read_bytes())
    bomb.unlink()
    elf.unlink()
    (tmp_path / "keep.txt").write_text("kept\n")
    _, skipped = load(tmp_path)
    assert skipped["bomb.docx.gz"].startswith("a zip bomb: ")
    assert skipped["elf.pdf.xz"].startswith("malformed PDF: ")
