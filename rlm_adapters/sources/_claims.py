"""An answer split into claims: numbers, names, quoted spans and sentences, each to be checked.

- numbers: ``42``, ``1,234.5``, ``-3%``, ``2024-05-08``, ``10:00:00`` (not list markers);
- names: identifiers (``ZEBRA-4821``, ``data-7``, ``a.txt``, ``snake_case``, ``CamelCase``, ``HTTP``) and
  proper names (a run of capitalised words, or one capitalised word that does not start a sentence);
- quotes: text between ``"..."``, ``“...”``, backticks, or single quotes that are not apostrophes;
- sentences: the rest of each sentence, by its distinctive words (at least two of them).

Numbers, names and quotes are checked exactly; a sentence by most of its distinctive words on one line.
A structured answer (a JSON value) is split leaf by leaf: keys are not claims.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from rlm_adapters.core import ClaimKind
from rlm_adapters.sources._words import STOP, WORD, distinctive

MAX_CLAIMS = 200
MAX_ANSWER_CHARS = 200_000
_QUOTE = re.compile(r'"([^"\n]{3,400})"|“([^”\n]{3,400})”|`([^`\n]{3,400})`|(?<!\w)\'([^\'\n]{3,400})\'(?!\w)')
# A number never ends inside a longer token (possessive: "09:00:07.000Z" gives no "00:07" by backtracking).
_NUMBER = re.compile(r"(?<![\w.,\-])[-+]?\d+(?:[.,:/\-]\d+)*+%?(?![\w.:\-]\w)(?!\w)")
# A timestamp is one claim, as the input writes it: 2026-12-01T09:00:07.000Z, 2026-12-01 09:00:07+02:00.
_TIMESTAMP = re.compile(
    r"(?<![\w.\-:])\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?(?![\w:])"
)
_URL = re.compile(r"\b[a-z][a-z0-9+.\-]*://[^\s\"'<>()\[\]]*[^\s\"'<>()\[\].,;:!?]")
# A name keeps its underscores, leading and trailing (_convert_other, __future__.py, self._value_): cut
# without them it stands nowhere whole in the input that holds it.
_TOKEN = re.compile(r"_*[^\W_](?:[\w./@#+\-]*[^\W_])?_*")
_EMPHASIS = re.compile(r"_([^\W\d_]+)_")  # markdown's _word_, not a name
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+(?=[\"“'(\[]?[A-Z0-9])|\n\s*")
_LIST_MARKER = re.compile(r"(?m)^\s*(\d+)[.)]\s")
_AFTER_STOP = re.compile(r"(?:^|[.!?:\n])[\W_]*")
_ABBREVIATIONS = frozenset(["e.g", "i.e", "etc", "vs", "a.m", "p.m", "u.s", "cf"])


@dataclass(frozen=True)
class Draft:
    """A claim before it is checked.

    Attributes:
        text: As the answer words it.
        kind: ``number``, ``name``, ``quote`` or ``sentence``.
        start: Its offset in the answer.
        end: Where it ends.
        words: For a sentence, the stems of its own distinctive words.
    """

    text: str
    kind: ClaimKind
    start: int
    end: int
    words: tuple[str, ...] = ()


def split(answer: str, named: Sequence[tuple[int, int]] = ()) -> tuple[list[Draft], bool]:
    """The claims of a text answer, in answer order, and whether some were left out (over `MAX_CLAIMS`).

    Args:
        answer: The answer.
        named: ``(start, end)`` of the file names the answer holds (`_named.named_files`): each is one
            name, whatever characters it holds (``docs/caf\\xe9.md``, ``my notes.txt``).
    """
    drafts = list(_drafts(answer[:MAX_ANSWER_CHARS], named))
    drafts.sort(key=lambda d: (d.start, d.kind == "sentence"))
    return drafts[:MAX_CLAIMS], len(drafts) > MAX_CLAIMS or len(answer) > MAX_ANSWER_CHARS


def split_value(answer: str, value: Any) -> tuple[list[Draft], bool]:
    """The claims of a structured answer: those of each string leaf of `value`, and each number leaf.

    Offsets are found in `answer` (the value as JSON text), leaf after leaf; when `answer` is not that
    JSON (no leaf is found in it), the answer is split as text.
    """
    drafts: list[Draft] = []
    cursor = 0
    leaves = list(_leaves(value))
    for leaf in leaves:
        if isinstance(leaf, str):
            encoded = json.dumps(leaf, ensure_ascii=False)
            at = answer.find(encoded, cursor)
            if at < 0:
                continue
            cursor = at + len(encoded)
            found = list(_drafts(leaf))
            if not found and _TOKEN.fullmatch(leaf) and leaf[0].isupper() and leaf.lower() not in STOP:
                found = [Draft(leaf, "name", 0, len(leaf))]  # a leaf that is one capitalised word: a name
            if len(encoded) == len(leaf) + 2:  # no escapes: offsets inside the leaf are offsets in the answer
                drafts += [_moved(d, at + 1) for d in found]
            else:
                drafts += [Draft(d.text, d.kind, at, cursor, d.words) for d in found]
        else:
            text = json.dumps(leaf)
            match = re.compile(rf"(?<![\w.]){re.escape(text)}(?![\w.])").search(answer, cursor)
            if match is not None:
                cursor = match.end()
                drafts.append(Draft(text, "number", match.start(), match.end()))
        if len(drafts) > MAX_CLAIMS:
            return drafts[:MAX_CLAIMS], True
    if leaves and not cursor:
        return split(answer)
    return drafts, False


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, str) or (isinstance(value, int | float) and not isinstance(value, bool)):
        yield value


def _moved(draft: Draft, by: int) -> Draft:
    return Draft(draft.text, draft.kind, draft.start + by, draft.end + by, draft.words)


def _drafts(answer: str, named: Sequence[tuple[int, int]] = ()) -> Iterator[Draft]:
    taken = bytearray(len(answer) + 1)  # 1 where a claim already holds the character

    def take(start: int, end: int) -> None:
        taken[start:end] = b"\x01" * (end - start)

    for match in _QUOTE.finditer(answer):
        group = next(i for i, g in enumerate(match.groups(), 1) if g is not None)
        text = match.group(group).strip()
        if len(text) >= 3:
            take(*match.span())
            yield Draft(text, "quote", match.start(group), match.end(group))
    for match in _URL.finditer(answer):  # before numbers: the digits of a link are part of it
        if not taken[match.start()]:
            take(*match.span())
            yield Draft(match.group(), "name", match.start(), match.end())
    for start, end in named:  # a file's name is one claim, before its digits or dots split it
        if end <= len(answer) and not any(taken[start:end]):
            take(start, end)
            yield Draft(answer[start:end], "name", start, end)
    markers = {m.span(1) for m in _LIST_MARKER.finditer(answer)}
    starts = {m.end() for m in _AFTER_STOP.finditer(answer)}
    for match in _TIMESTAMP.finditer(answer):
        if not any(taken[match.start() : match.end()]):
            take(*match.span())
            yield Draft(match.group(), "number", match.start(), match.end())
    for match in _NUMBER.finditer(answer):
        if not taken[match.start()] and match.span() not in markers:
            take(*match.span())
            yield Draft(match.group(), "number", match.start(), match.end())
    for draft in list(_names(answer, taken, starts)):
        take(draft.start, draft.end)
        yield draft
    for first, last in _sentences(answer):
        own = " ".join(w.group() for w in WORD.finditer(answer, first, last) if not taken[w.start()])
        words = tuple(distinctive(own))
        if len(words) >= 2:
            yield Draft(answer[first:last].strip(), "sentence", first, last, words)


def _names(answer: str, taken: bytearray, starts: set[int]) -> Iterator[Draft]:
    proper: list[tuple[int, int]] = []  # the run of capitalised words being read
    for match in _TOKEN.finditer(answer):
        start, end, token = match.start(), match.end(), match.group()
        emphasis = _EMPHASIS.fullmatch(token)
        if emphasis is not None:
            start, end, token = start + 1, end - 1, emphasis.group(1)
        if taken[start]:
            continue
        if _identifier(token):
            yield from _proper(answer, proper, starts)
            proper = []
            yield Draft(token, "name", start, end)
        elif token[0].isupper() and token.isalpha() and token.lower() not in STOP:
            if proper and answer[proper[-1][1] : start] != " ":
                yield from _proper(answer, proper, starts)
                proper = []
            proper.append((start, end))
        else:
            yield from _proper(answer, proper, starts)
            proper = []
    yield from _proper(answer, proper, starts)


def _proper(answer: str, run: list[tuple[int, int]], starts: set[int]) -> Iterator[Draft]:
    if len(run) == 1 and run[0][0] in starts:
        return  # one capitalised word starting a sentence: an ordinary word
    if run:
        yield Draft(answer[run[0][0] : run[-1][1]], "name", run[0][0], run[-1][1])


def _identifier(token: str) -> bool:
    has_digit = any(c.isdigit() for c in token)
    has_letter = any(c.isalpha() for c in token)
    if not has_letter or token.lower() in _ABBREVIATIONS:
        return False
    if has_digit or any(c in "_./@:#+" for c in token):
        return True
    letters = token.replace("-", "")
    if len(letters) >= 2 and letters.isupper():
        return True  # HTTP, ZEBRA-ALPHA
    return any(a.islower() and b.isupper() for a, b in pairwise(token))  # CamelCase


def _sentences(answer: str) -> Iterator[tuple[int, int]]:
    at = 0
    for match in _SENTENCE_BREAK.finditer(answer):
        if answer[at : match.start()].strip():
            yield at, match.start()
        at = match.end()
    if answer[at:].strip():
        yield at, len(answer)
