"""Sizes in bytes: read from what a user writes (``"2GiB"``), and written for a message (``2 GiB``).

Neutral ground: the sandboxes' limits and the file loader's caps both speak in these words, and neither
should import the other for them.
"""

from __future__ import annotations

__all__ = ["human_bytes", "parse_size"]

_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(value: int | str | None) -> int | None:
    """Bytes from an int or a string such as ``"512MiB"`` / ``"2GiB"`` / ``"1G"`` / ``"64k"`` (None stays None).

    Raises:
        ValueError: The string is not a size; the message quotes it.
    """
    if value is None or isinstance(value, int):
        return value
    text = value.strip().lower().removesuffix("b").removesuffix("i")
    try:
        if text and text[-1] in _UNITS:
            return int(float(text[:-1]) * _UNITS[text[-1]])
        return int(text)
    except ValueError:
        raise ValueError(f"cannot read the size {value!r}; use bytes or a string like '2GiB'") from None


def human_bytes(size: float) -> str:
    """``1,023 bytes``, ``1.5 MiB``, ``2 GiB``: the largest binary unit under the size, one decimal at most."""
    if abs(size) < 1024:
        return f"{size:,.0f} byte" + ("" if round(size) == 1 else "s")
    units = ("KiB", "MiB", "GiB", "TiB")
    size, index = size / 1024, 0
    while abs(size) >= 1024 and index < len(units) - 1:
        size, index = size / 1024, index + 1
    return f"{size:,.1f}".removesuffix(".0") + f" {units[index]}"
