"""Sizes read from what a user writes and written for messages, one way for the whole package."""

from __future__ import annotations

import pytest

from rlm_adapters.core.units import human_bytes, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [("2GiB", 2 * 1024**3), ("512MiB", 512 * 1024**2), ("1G", 1024**3), (" 64k ", 64 * 1024), ("1.5m", 3 * 2**19),
     ("10", 10), (10, 10), (None, None)],
)  # fmt: skip
def test_parse_size(text: int | str | None, size: int | None) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["lots", "", "GiB", "1.5x"])
def test_parse_size_quotes_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match=f"cannot read the size {text!r}"):
        parse_size(text)


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 bytes"), (1, "1 byte"), (1023, "1,023 bytes"), (1024, "1 KiB"), (1536, "1.5 KiB"),
     (4 * 1024**2, "4 MiB"), (2 * 1024**3, "2 GiB"), (3 * 1024**4, "3 TiB"), (2 * 1024**5, "2,048 TiB")],
)  # fmt: skip
def test_human_bytes(size: int, text: str) -> None:
    assert human_bytes(size) == text
