"""Issue 47: claims that do not lie. What a model quoted verbatim from text that reached it is supported.

The real cases of the issue, each planted in text a sub-model was sent word for word: a name cut without its
underscores (``convert_other`` of ``_convert_other``, ``future__.py``, ``Feature``, ``self._value``,
``UNPACK_FORMATS``) and numbers cut from inside a timestamp (``00:07`` of ``09:00:07.000Z``) stood nowhere
whole, and were called unsupported: "in no text that reached a model". Tokens are now cut on the input's own
boundaries, and a name or number inside a supported span is supported where that span's input holds it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from rlm_adapters.core import Claim
from rlm_adapters.core.events import SubCallFinished, SubCallSent, SubCallStarted
from rlm_adapters.sources import NOWHERE, SourceTracker, _claims
from rlm_adapters.sources._claims import split

DECIMAL = """\
    def __add__(self, other, context=None):
        \"\"\"Returns self + other.

        -INF + INF (or the reverse) cause InvalidOperation errors.
        \"\"\"
        other = _convert_other(other)
        if other is NotImplemented:
            return other

    def compare_total(self, other, context=None):
        \"\"\"Compares self to other using the abstract representations.\"\"\"
        other = _convert_other(other, raiseit=True)
"""
FUTURE = """\
\"\"\"Record of phased-in incompatible language changes, in __future__.py itself.\"\"\"

class _Feature:

    def __init__(self, optionalRelease, mandatoryRelease, compiler_flag):
        self.optional = optionalRelease
        self.mandatory = mandatoryRelease
        self.compiler_flag = compiler_flag
"""
ENUM = """\
    def __init__(self, *args, **kwds):
        pass

    def _generate_next_value_(name, start, count, last_values):
        return self._value_ + count
"""
SHUTIL = """\
_UNPACK_FORMATS = {
    'tar': (['.tar'], _unpack_tarfile, [], "uncompressed tar file"),
    'zip': (['.zip'], _unpack_zipfile, [], "ZIP file"),
}
"""
TRANSCRIPT = """\
[2026-12-01T09:00:07.000Z user] Please rotate the staging keys before the demo.
[2026-12-01T09:00:10.000Z assistant] Rotating the staging keys now; the old ones expire at noon.
"""
FILES = {
    "Lib/_pydecimal.py": DECIMAL,
    "Lib/__future__.py": FUTURE,
    "Lib/enum.py": ENUM,
    "Lib/shutil.py": SHUTIL,
    "session.log": TRANSCRIPT,
}
ANSWER = (
    "In compare_total the code runs other = _convert_other(other, raiseit=True) first. "
    "The module __future__.py defines the class _Feature, whose records hold compiler_flag. "
    "The enum helper returns self._value_ + count, and shutil keeps its archive kinds in _UNPACK_FORMATS. "
    "The user asked at [2026-12-01T09:00:07.000Z user] and the assistant answered at "
    "[2026-12-01T09:00:10.000Z assistant]."
)
# Each real case, as the claim the answer now gives and that must be supported.
REAL_CASES = [
    "_convert_other",
    "__future__.py",
    "_Feature",
    "self._value_",
    "_UNPACK_FORMATS",
    "2026-12-01T09:00:07.000Z",
    "2026-12-01T09:00:10.000Z",
]


def _checked(answer: str, files: dict[str, str] = FILES) -> list[Claim]:
    documents = [{"id": path, "text": text, "metadata": {"path": path}} for path, text in files.items()]
    tracker = SourceTracker(documents)
    tracker.start()
    for number, (path, text) in enumerate(files.items()):  # each file's text sent to a sub-model word for word
        ids: dict[str, Any] = {"run_id": "r", "call_id": f"c{number}", "batch_id": None, "model": "m"}
        tracker.on_event(SubCallStarted(**ids, batch_size=1, call_kind="llm_query", prompt=f"Read {path}:\n{text}"))
        tracker.on_event(SubCallSent(**ids, call_kind="llm_query"))
        finished = SubCallFinished(
            **ids, call_kind="llm_query", response="ok", error=None, input_tokens=1, output_tokens=1, cost=0.0,
            duration=0.0,
        )  # fmt: skip
        tracker.on_event(finished)
    return tracker.findings(answer).claims


def test_names_and_timestamps_are_cut_on_the_inputs_own_boundaries() -> None:
    cut = {draft.text for draft in split(ANSWER)[0] if draft.kind != "sentence"}
    assert set(REAL_CASES) <= cut
    # None of the fragments the old cut gave: each stood nowhere whole in the input.
    assert not cut & {"convert_other", "future__.py", "Feature", "self._value", "UNPACK_FORMATS", "00:07", "00:10"}


def test_every_real_case_is_supported_with_the_line_that_holds_it() -> None:
    claims = {claim.text: claim for claim in _checked(ANSWER)}
    for text in REAL_CASES:
        claim = claims[text]
        assert claim.supported and claim.via == "input", (text, claim.reason)
        assert claim.source is not None and text in FILES[claim.source.path].splitlines()[claim.source.line_start - 1]
    # No name, number or quote of the answer is called unsupported (its paraphrasing sentences may be: "no
    # line that reached a model holds most of its words" is true of them).
    assert [claim.text for claim in claims.values() if not claim.supported and claim.kind != "sentence"] == []


def test_what_stands_in_no_text_that_reached_a_model_is_still_unsupported() -> None:
    made_up = (
        "It calls _convert_others(other) and reads _UNPACK_FORMATS_V2; the user asked at "
        "[2026-12-01T09:00:08.000Z user]."
    )
    claims = {claim.text: claim for claim in _checked(made_up)}
    for text in ("_convert_others", "_UNPACK_FORMATS_V2", "2026-12-01T09:00:08.000Z"):
        assert not claims[text].supported and claims[text].reason == NOWHERE, text


def test_a_name_cut_from_a_supported_sentence_is_supported_where_that_sentence_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's sentence was supported and the name cut from it was not. With the old cut (a name never
    starts with "_") put back, the rule still holds: the input holds the name as the answer glues it."""
    monkeypatch.setattr(_claims, "_TOKEN", re.compile(r"[^\W_](?:[\w./@#+\-]*[^\W_])?"))
    claims = {claim.text: claim for claim in _checked("Then other = _convert_other(other, raiseit=True) runs.")}
    sentence = next(claim for claim in claims.values() if claim.kind == "sentence")
    assert sentence.supported and "_convert_other" not in claims  # cut as the issue saw it
    assert claims["convert_other"].supported and claims["convert_other"].source is not None
    assert claims["convert_other"].source.location == "Lib/_pydecimal.py:12"
    # A number the supported sentence holds but its input does not is no part of it: still unsupported.
    claims = {claim.text: claim for claim in _checked("The code runs other = _convert_other(other, raiseit=4242).")}
    assert not claims["4242"].supported
