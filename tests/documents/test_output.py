"""documents/_output.py: what a converter sends is checked field by field; nothing malformed is used."""

from __future__ import annotations

import json
import re
import struct

import pytest

from rlm_adapters.documents._output import BadOutput, Converted, Refusal, parse_output


def frame(header: object, text: bytes = b"") -> bytes:
    body = json.dumps(header).encode()
    return struct.pack(">I", len(body)) + body + text


def ok(text: bytes, places: object = (), **more: object) -> bytes:
    return frame({"type": "document", "ok": True, "places": list(places), "text_bytes": len(text), **more}, text)


def test_a_well_formed_answer_gives_its_text_places_and_notes() -> None:
    text = b"[page 1]\nhello\n[page 2]\nworld\n"
    got = parse_output(ok(text, [[0, "page", "1"], [15, "page", "2"]], notes=["a note"]), text_bytes=100, max_places=5)
    assert got == Converted(text.decode(), len(text), ((0, "page", "1"), (15, "page", "2")), ("a note",))


def test_a_refusal_gives_its_reason_on_one_line() -> None:
    got = parse_output(
        frame({"type": "document", "ok": False, "reason": "encrypted:\n\x1b[2Jneeds a password"}),
        text_bytes=9,
        max_places=1,
    )
    assert got == Refusal("encrypted: \x1b[2Jneeds a password")


@pytest.mark.parametrize(
    ("output", "words"),
    [
        (b"", "no answer"),
        (struct.pack(">I", 1 << 30) + b"{}", "header of"),
        (struct.pack(">I", 3) + b"{x}", "not JSON"),
        (frame([1, 2]), "not a document answer"),
        (frame({"type": "result", "ok": True}), "not a document answer"),
        (frame({"type": "document", "ok": False}), "without a reason"),
        (frame({"type": "document", "ok": False, "reason": "x"}, b"smuggled text"), "without a reason"),
        (frame({"type": "document", "ok": True, "places": [], "text_bytes": 5}, b"abc"), "announced 5"),
        (frame({"type": "document", "ok": True, "places": [], "text_bytes": True}, b"a"), "announced True"),
        (ok(b"\xff\xfe"), "not UTF-8"),
        (ok(b"abc", [[4, "page", "1"]]), "outside the text"),
        (ok(b"abcdef", [[3, "page", "1"], [1, "page", "2"]]), "out of order"),
        (ok(b"abc", [[0, "chapter", "1"]]), "unknown kind"),
        (ok(b"abc", [[0, "page", ""]]), "bad label"),
        (ok(b"abc", [[0, "page", "x" * 201]]), "bad label"),
        (ok(b"abc", [[0, "page"]]), "not [offset, kind, label]"),
        (ok(b"abc", [[0, "page", "1"]] * 6), "within the cap"),
        (ok(b"abc", notes=[1]), "notes"),
        (struct.pack(">I", 20000) + b"[" * 20000, "not JSON"),
    ],
)
def test_a_malformed_answer_is_refused_naming_what_was_wrong(output: bytes, words: str) -> None:
    with pytest.raises(BadOutput, match=re.escape(words)):
        parse_output(output, text_bytes=10, max_places=5)


def test_text_over_the_cap_is_refused_even_when_announced() -> None:
    with pytest.raises(BadOutput, match="announced 11"):
        parse_output(ok(b"x" * 11), text_bytes=10, max_places=5)
