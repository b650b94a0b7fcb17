"""The words an answer is matched by: distinctive ones, lightly stemmed, found whole in the input."""

from __future__ import annotations

import re

WORD = re.compile(r"[^\W_]+")
# A stem matches a word that goes on with one of these (password/passwords, rotate/rotates, exceed/exceeded).
TAILS = frozenset(["", "s", "es", "e", "ed", "d", "ing", "er", "ers"])
_SUFFIXES = ("ing", "ed", "es", "s")
_MIN_STEM = 4
_TAIL = re.compile(r"[^\W_]{1,4}")  # what follows a stem: a tail is at most 3 letters, so 4 means a longer word
STOP = frozenset(
    [
        *("the", "a", "an", "and", "or", "of", "to", "in", "on", "at", "for", "from", "by", "with", "is", "are"),
        *("was", "were", "be", "been", "it", "its", "this", "that", "these", "those", "as", "not", "no", "yes"),
        *("but", "if", "then", "than", "so", "do", "does", "did", "has", "have", "had", "which", "who", "whom"),
        *("what", "when", "where", "why", "how", "file", "files", "line", "lines", "answer", "there", "their"),
        *("they", "them", "he", "she", "his", "her", "you", "your", "we", "our", "i"),
    ]
)


def stem(word: str) -> str:
    """`word` lowered, without one plural or tense ending when what is left is still four letters long."""
    word = word.lower()
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
            return word[: -len(suffix)]
    return word


def distinctive(text: str) -> list[str]:
    """The stems of `text`'s distinctive words (over two characters, not stop words), first seen first."""
    seen: dict[str, None] = {}
    for word in WORD.findall(text):
        lowered = word.lower()
        if len(lowered) > 2 and lowered not in STOP:
            seen.setdefault(stem(lowered), None)
    return list(seen)


def word_at(text: str, start: int, size: int) -> bool:
    """Whether the stem found at ``text[start:start + size]`` starts a word that ends in one of `TAILS`."""
    if start > 0 and text[start - 1].isalnum():
        return False
    tail = _TAIL.match(text, start + size)
    return tail is None or tail.group().lower() in TAILS
