"""Text in another encoding than UTF-8 is read right and named (issue 51, item 5).

A Latin-1 file reached the model as ``Caf\ufffd na\ufffdve r\ufffdsum\ufffd \ufffd100`` with nothing said; a UTF-16
file was skipped as binary. The host still reads UTF-8 itself; every other text file is decoded behind the
converter's walls, its encoding detected there and named in the file's notes.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import pytest

from rlm_adapters.files import LoadedFile, load_paths

FRENCH = "Café naïve résumé €100 — «l'œuvre» coûte 12 € à l'hôtel.\n"
GERMAN = "Grüße aus München: die Straße ist schön, 300 m².\n"
POLISH = "Zażółć gęślą jaźń. Łódź jest piękna.\n"
JAPANESE = "これは日本語のテキストです。東京の天気は晴れです。\n"
RUSSIAN = "Привет мир, это тестовый текст на русском языке.\n"


def read_one(path: Path) -> LoadedFile:
    loaded = load_paths([path.name], [path.parent], base=path.parent)
    assert loaded.skipped == []
    (file,) = loaded.files
    return file


@pytest.mark.parametrize(
    ("text", "codec", "named"),
    [
        (FRENCH, "cp1252", "Windows-1252"),
        (GERMAN, "latin-1", "Windows-1252"),
        (FRENCH.replace("€", "EUR").replace("œ", "oe").replace("—", "-"), "latin-1", "Windows-1252"),
        (POLISH, "cp1250", "Windows-1250"),
        (JAPANESE, "shift_jis", "Shift_JIS (cp932)"),
        (RUSSIAN, "cp1251", "Windows-1251"),
    ],
)
def test_a_legacy_encoding_is_detected_read_right_and_named(tmp_path: Path, text: str, codec: str, named: str) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(text.encode(codec))
    file = read_one(path)
    assert file.text == text
    assert file.invalid_utf8 and file.format == "text"
    (note,) = file.metadata["notes"]
    assert note.startswith(f"not UTF-8: read as {named} (")


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
def test_text_with_a_byte_order_mark_is_no_longer_skipped_as_binary(tmp_path: Path, codec: str) -> None:
    path = tmp_path / "wide.txt"
    data = FRENCH.encode(codec)
    path.write_bytes(data if codec != "utf-16-be" else b"\xfe\xff" + data)
    file = read_one(path)
    assert file.text == FRENCH
    assert file.metadata["notes"] == [f"not UTF-8: read as UTF-{codec[4:6]} (its byte-order mark says so)"]


def test_utf8_with_a_few_damaged_bytes_stays_utf8(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(FRENCH.encode() * 50 + b"a cut sequence \xe2\x82 and a stray \xff byte\n")
    file = read_one(path)
    assert file.text.startswith(FRENCH * 50)  # not read as Windows-1252 mojibake (Ã©)
    assert file.text.endswith("a cut sequence \ufffd and a stray \ufffd byte\n")
    assert file.metadata["notes"] == ["not valid UTF-8: read as UTF-8 with 2 damaged byte sequences replaced by U+FFFD"]


def test_utf8_is_still_read_on_the_host_and_marked_as_before(tmp_path: Path) -> None:
    path = tmp_path / "ok.txt"
    path.write_text(FRENCH, encoding="utf-8")
    file = read_one(path)
    assert file.text == FRENCH and not file.invalid_utf8 and file.format is None and file.metadata == {}


def test_binary_files_are_still_skipped(tmp_path: Path) -> None:
    (tmp_path / "nul.dat").write_bytes(b"\x00\x01binary")
    noise = bytes(b for b in random.Random(51).randbytes(8192) if b)  # no NUL byte for the host's sniff to see
    (tmp_path / "noise.dat").write_bytes(noise)
    (tmp_path / "keep.txt").write_text("kept\n")
    loaded = load_paths(["."], [tmp_path], base=tmp_path)
    assert [f.path for f in loaded.files] == ["keep.txt"]
    reasons = {s.path: s.reason for s in loaded.skipped}
    assert reasons == {"nul.dat": "binary file", "noise.dat": "binary data, not text (no text encoding fits it)"}


def test_a_compressed_latin1_file_is_decompressed_and_decoded(tmp_path: Path) -> None:
    path = tmp_path / "old.txt.gz"
    path.write_bytes(gzip.compress(GERMAN.encode("latin-1")))
    file = read_one(path)
    assert file.text == GERMAN and file.metadata["compression"] == "gzip"
    assert file.metadata["notes"] == ["not UTF-8: read as Windows-1252 (its accented letters say so)"]


def test_the_documents_carry_the_note_for_model_code(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(FRENCH.encode("cp1252"))
    (tmp_path / "b.txt").write_text("plain\n")
    documents = load_paths(["."], [tmp_path], base=tmp_path).documents()
    latin = next(d for d in documents if d["id"] == "a.txt")
    assert latin["text"] == FRENCH and latin["metadata"]["invalid_utf8"] is True
    assert latin["metadata"]["notes"] == ["not UTF-8: read as Windows-1252 (its accented letters say so)"]


def test_binary_data_that_starts_like_a_byte_order_mark_is_still_binary(tmp_path: Path) -> None:
    small_numbers = b"\x01\x00\x00\x00\x07\x00\x10\x00" * 500
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe" + small_numbers)
    (tmp_path / "keep.txt").write_text("kept\n")
    loaded = load_paths(["."], [tmp_path], base=tmp_path)
    assert [f.path for f in loaded.files] == ["keep.txt"]
    assert loaded.skipped[0].reason == (
        "binary data, not text (it starts like UTF-16 but holds control characters no text has)"
    )
