"""Text primitives of provenance, each running at C speed over long texts: common runs, unescaping, slices.

Nothing here loops over the characters or lines of an input in Python: runs are measured by comparing
slices that double in size (``memcmp`` underneath), reprs are unescaped with ``str.replace``, and long
texts are handed out in slices that end on a newline.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_GROW_FROM = 64
_GROW_TO = 1 << 20
# A word token (letters and digits), as the minimum length of a match is counted.
TOKEN = re.compile(r"[^\W_]+")
_GUARD = "\ue000"  # stands for an escaped backslash while the other escapes are undone
_SIMPLE_ESCAPES = (("\\n", "\n"), ("\\t", "\t"), ("\\r", "\r"), ("\\'", "'"), ('\\"', '"'), ("\\/", "/"))
_HEX_ESCAPE = re.compile(
    r"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})|\\u([0-9a-f]{4})|\\x([0-9a-f]{2})", re.IGNORECASE
)


def forward(a: str, i: int, b: str, j: int) -> int:
    """How many characters ``a[i:]`` and ``b[j:]`` have in common from their start."""
    top = min(len(a) - i, len(b) - j)
    done, step = 0, _GROW_FROM
    while done < top:  # grow while equal...
        size = min(step, top - done)
        if a[i + done : i + done + size] != b[j + done : j + done + size]:
            break
        done += size
        step = min(step * 2, _GROW_TO)
    else:
        return done
    while step > 1:  # ...then halve down to the first difference
        step //= 2
        size = min(step, top - done)
        if size and a[i + done : i + done + size] == b[j + done : j + done + size]:
            done += size
    return done


def backward(a: str, i: int, b: str, j: int) -> int:
    """How many characters ``a[:i]`` and ``b[:j]`` have in common at their end."""
    top = min(i, j)
    done, step = 0, _GROW_FROM
    while done < top:
        size = min(step, top - done)
        if a[i - done - size : i - done] != b[j - done - size : j - done]:
            break
        done += size
        step = min(step * 2, _GROW_TO)
    else:
        return done
    while step > 1:
        step //= 2
        size = min(step, top - done)
        if size and a[i - done - size : i - done] == b[j - done - size : j - done]:
            done += size
    return done


def unescape(text: str) -> str | None:
    """`text` with the escapes of a Python repr or of JSON undone (None when it has none).

    Code often prints a dict or a list (``print(doc)``), or sends ``json.dumps(...)`` to a model: the
    document's newlines and quotes then arrive as ``\\n`` and ``\\'``. Undoing them lets the text be
    found in the document again.
    """
    if "\\" not in text:
        return None
    guarded = _GUARD not in text
    plain = text.replace("\\\\", _GUARD) if guarded else text
    for escaped, character in _SIMPLE_ESCAPES:
        plain = plain.replace(escaped, character)
    if "\\u" in plain or "\\x" in plain or "\\U" in plain or "\\X" in plain:
        plain = _HEX_ESCAPE.sub(_hex, plain)
    if guarded:
        plain = plain.replace(_GUARD, "\\")
    return None if plain == text else plain


def _hex(match: re.Match[str]) -> str:
    high, low, single, byte = match.groups()
    if high is not None:
        return chr(0x10000 + ((int(high, 16) - 0xD800) << 10) + (int(low, 16) - 0xDC00))
    return chr(int(single or byte, 16))


def tokens(text: str) -> int:
    """How many word tokens `text` holds."""
    return len(TOKEN.findall(text))


def slices(text: str, size: int, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int]]:
    """``(start, end)`` slices of ``text[start:end]`` of about `size` characters, each ending after a newline
    (or where the range ends), so that no line is split between two of them; a line over four times
    `size` long is split anyway, to keep each slice small."""
    stop = len(text) if end is None else end
    at = start
    while at < stop:
        cut = min(at + size, stop)
        if cut < stop:
            newline = text.rfind("\n", at, cut)
            if newline < at:
                newline = text.find("\n", cut, min(stop, at + 4 * size))
            if newline >= at:
                cut = newline + 1
        yield at, cut
        at = cut
