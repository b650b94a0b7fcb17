"""An ASCII context as a ``str`` over a private read-only mapping of its file, and every way it declines (issue 41)."""

from __future__ import annotations

import gc
import mmap
import os
import sys
from pathlib import Path

import pytest

from rlm_adapters.core.context import write_context_file
from rlm_adapters.core.sandbox.programs.worker import mapped
from rlm_adapters.core.sandbox.programs.worker.program import load_context

KNOWN = mapped.str_layout() is not None
needs_layout = pytest.mark.skipif(not KNOWN, reason=f"no known str layout on {sys.implementation.name} {sys.version}")


def build(path: Path) -> str | None:
    """`mapped._build` on the file (what `mapped_text` does once it found the file read-only here)."""
    layout = mapped.str_layout()
    assert layout is not None
    fd = os.open(path, os.O_RDONLY)
    try:
        return mapped._build(fd, os.fstat(fd).st_size, *layout)
    finally:
        os.close(fd)


def mapping_of(address: int) -> str | None:
    """The file backing `address` in this process, if any."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if low <= address < high:
            return fields[5] if len(fields) == 6 else None
    return None


def test_this_interpreter_is_one_the_layout_is_known_for() -> None:
    expected = sys.implementation.name == "cpython" and sys.version_info[:2] in mapped.KNOWN_VERSIONS
    assert KNOWN is (expected and "t" not in sys.abiflags and os.uname().machine in mapped.MACHINES)


@needs_layout
@pytest.mark.parametrize("size", [1, mmap.PAGESIZE - 1, mmap.PAGESIZE, mmap.PAGESIZE + 1, 300_000])
def test_the_string_is_the_file_its_characters_in_the_mapping(tmp_path: Path, size: int) -> None:
    text = ("0123456789 abcdefghijklmnopqrstuvwxyz\r\n" * (size // 39 + 1))[:size]
    path = write_context_file(text, tmp_path)
    value = build(path)
    assert value is not None and type(value) is str and len(value) == size
    assert value == text and hash(value) == hash(text) and {value: 1}[text] == 1
    start = id(value) + sys.getsizeof(value) - size - 1
    assert mapping_of(start) == str(path) and mapping_of(start - 1) is None  # header: a private anonymous page
    grown = value
    grown += "!"  # never resized in place: a new string, the mapped one unchanged
    assert grown == text + "!" and value == text and value[-5:] == text[-5:]
    assert value.split("\n") == text.split("\n") and value.encode() == text.encode() and sys.intern(value) == text
    del grown
    gc.collect()
    assert value == text


@needs_layout
def test_a_file_that_is_not_ascii_is_left_to_decoding_and_unmapped(tmp_path: Path) -> None:
    path = write_context_file("ascii first, then caf\u00e9" * 1000, tmp_path)
    assert build(path) is None
    assert str(path) not in Path("/proc/self/maps").read_text()


def test_a_file_this_process_could_write_is_not_mapped(tmp_path: Path) -> None:
    path = write_context_file("ascii", tmp_path)  # 0644 and ours: the walls would have made it read-only
    assert mapped.mapped_text(str(path)) is None
    assert load_context({"path": str(path), "format": "text", "map": True}) == "ascii"


def test_an_unknown_interpreter_decodes_instead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mapped, "KNOWN_VERSIONS", ())
    assert mapped.str_layout() is None
    path = write_context_file("ascii text\n" * 100, tmp_path)
    monkeypatch.setattr(os, "open", _read_only_open(os.open))
    assert mapped.mapped_text(str(path)) is None
    assert load_context({"path": str(path), "format": "text", "map": True}) == "ascii text\n" * 100


def test_a_lone_surrogate_is_read_back_as_the_host_wrote_it(tmp_path: Path) -> None:
    text = "before \ud800 after"
    path = write_context_file(text, tmp_path)
    assert load_context({"path": str(path), "format": "text"}) == text


def _read_only_open(real: object) -> object:
    def opener(path: str, flags: int, *args: object) -> int:
        if flags & os.O_RDWR:
            raise PermissionError(13, "read-only behind the walls")
        return real(path, flags, *args)  # type: ignore[operator, no-any-return]

    return opener
