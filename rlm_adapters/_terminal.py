"""Text from outside made safe to show: the one rule for everything the CLI, the console and the viewer print.

The context, a model's reply, what model code printed, a file name and a trajectory log are all untrusted. A
terminal acts on some of their characters instead of showing them: ESC starts CSI and OSC sequences (clear the
screen, set the title, write the clipboard with OSC 52, make an OSC 8 link), BEL, BS and CR rewrite what is on
screen, the C1 range (U+0080-U+009F) holds one-character CSI and OSC introducers, and bidi overrides or
invisible characters make text read differently from what it is. `escape_controls` turns each of them into its
visible Python-style escape (``\\x1b``, ``\\u202e``), so the user sees that something was there and nothing acts;
`safe_text` does that for rich, whose markup (``[bold]``) it never interprets either. Lone surrogates (printable by
model code, not encodable to a terminal) are escaped the same way instead of failing the write.

This module sits beside `errors.py`: `core/engine/console.py`, the CLI, the viewer, the evals and the MCP server's
results all import it (rich only loads for `safe_text`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich loads only where a rich Text is made: the MCP server escapes without it
    from rich.text import Text

# C0 but tab and newline, DEL, C1; bidi marks, embeddings, overrides and isolates; invisible characters that
# hide or join text (zero-width space, word joiner and invisible operators, BOM, interlinear annotations,
# language tags); line and paragraph separators; lone surrogates. Zero-width (non-)joiners stay: scripts and
# emoji need them and they move no text.
_UNSAFE = (
    "\x00-\x08\x0b-\x1f\x7f-\x9f"
    "\u061c\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb"
    "\U000e0000-\U000e007f\ud800-\udfff"
)
UNSAFE = re.compile(f"[{_UNSAFE}]")
UNSAFE_OR_BREAK = re.compile(f"[{_UNSAFE}\t\n]")


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}
_WINDOW = 1 << 20  # characters one regex call scans (about 10 ms, the longest it holds the GIL)
# The ASCII bytes a terminal shows as they are (deleted by `bytes.translate`: what is left is to escape).
_SAFE = bytes(b for b in range(128) if not UNSAFE.match(chr(b)))
_SAFE_ONE_LINE = bytes(b for b in range(128) if not UNSAFE_OR_BREAK.match(chr(b)))


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(text: str, *, one_line: bool = False) -> str:
    """`text` with every character a terminal would act on shown as its escape (``\\x1b``, ``\\u202e``).

    Args:
        text: Untrusted text: from the input, a model, model code, a file name or a log.
        one_line: Also escape newlines and tabs, for a value inside a one-line message (a file name in a
            "skipped" line cannot forge a second line).

    Returns:
        The text as shown; text with nothing to escape comes back unchanged.
    """
    pattern = UNSAFE_OR_BREAK if one_line else UNSAFE
    if len(text) <= _WINDOW:
        return pattern.sub(_visible, text) if pattern.search(text) else text
    # A long text (a 40 MiB answer) goes in windows: the regex engine holds the GIL for the whole of one
    # call, so 64 MiB in one call (0.8 s) would stop every other thread for as long, a server's event loop
    # included. ASCII text (`isascii` is a flag, not a scan) is checked as bytes, twenty times faster.
    safe = _SAFE_ONE_LINE if one_line else _SAFE
    if text.isascii() and not any(
        text[i : i + _WINDOW].encode("ascii").translate(None, safe) for i in range(0, len(text), _WINDOW)
    ):
        return text
    first = next((start for start in range(0, len(text), _WINDOW) if pattern.search(text, start, start + _WINDOW)), -1)
    if first < 0:
        return text
    return text[:first] + "".join(
        pattern.sub(_visible, text[i : i + _WINDOW]) for i in range(first, len(text), _WINDOW)
    )


def safe_text(text: str, style: str = "", *, one_line: bool = False) -> Text:
    """`text` escaped (`escape_controls`) as a rich `Text`, which is never read as markup or emoji codes."""
    from rich.text import Text

    return Text(escape_controls(text, one_line=one_line), style=style)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_line(value: Any) -> str:
    """`value` as one line of JSON in which no character a terminal acts on appears raw.

    JSON already escapes C0; the same characters as `escape_controls` (DEL, C1, bidi, invisible ones, lone
    surrogates) become ``\\uXXXX`` escapes, which read back as the same value, so nothing is lost.
    """
    text = json.dumps(value, ensure_ascii=False)
    return UNSAFE.sub(_json_escape, text) if UNSAFE.search(text) else text
