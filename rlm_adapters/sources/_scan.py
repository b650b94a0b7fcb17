"""Many strings found at once in long texts: Aho–Corasick (``ahocorasick_rs``) over UTF-8, in slices.

One pass over the text whatever the number of patterns, in compiled code that releases the GIL. Texts
are searched in buffers of about a megabyte (short ranges joined by a NUL, long ones cut with an overlap
as long as the longest pattern), so memory stays flat whatever the input's size; the first buffers are
small. A pattern found more often than `cap` times stops being reported (and is dropped from the automaton
once its hits have cost what rebuilding it does): such a string is too common to tell anything. Matches are
handed back a buffer at a time, in lists, and Python touches each match once.
"""

from __future__ import annotations

import bisect
import contextlib
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence

from ahocorasick_rs import BytesAhoCorasick, Implementation

BUFFER = 1 << 20
_FIRST_BUFFER = 1 << 16
_REBUILD = 4096  # hits of capped patterns that pay for rebuilding the automaton without them
FEW_PATTERNS = 8  # this many patterns or fewer (case and all) are found by str.find, each in its own pass
_JOIN = "\x00"
# The library skips ahead with a prefilter, chosen from the patterns: 4 GB/s when their bytes are rare in
# the text, slower than no prefilter (150 against 500 MB/s) when they are common. Decoy patterns of
# control bytes turn it off; the first buffer is searched both ways and the faster one is kept.
_DECOYS = [bytes([1 + i % 7, 2 + (i // 7) % 5, 3, 4 + i % 3]) * 6 for i in range(120)]
_DFA_PATTERNS = 2000  # a DFA of more patterns than this takes too much memory
# A DFA's construction grows with the square of a repetitive pattern's length (the answer's exact strings
# can be long: 5 s for one run of 5,000 "a", holding the GIL); the NFA builds in linear time.
_DFA_LONGEST = 128

# (key, text, start, end): search text[start:end]; offsets found are reported in text's coordinates.
Range = tuple[int, str, int, int]
_HALT = threading.local()  # this thread's `halting` event: a scan stops at its next buffer once it is set


class Halted(Exception):
    """A scan stopped because its thread's work was called off (`halting`)."""


def check_halt() -> None:
    """Raise `Halted` when this thread's work was called off (`halting`): for loops of Python over many hits."""
    event: threading.Event | None = getattr(_HALT, "event", None)
    if event is not None and event.is_set():
        raise Halted


@contextlib.contextmanager
def halting(event: threading.Event) -> Iterator[None]:
    """Every scan on this thread inside the block raises `Halted` at its next buffer once `event` is set.

    The work of sources cut at their bound goes on in its thread until it looks: a scan looks every buffer,
    so a cut tracker stops within one buffer's work, not after a pass over 200 MB. Per thread, so that one
    run's cut never stops another's scan.
    """
    previous = getattr(_HALT, "event", None)
    _HALT.event = event
    try:
        yield
    finally:
        _HALT.event = previous


class _Automaton:
    def __init__(self, patterns: list[str], alive: list[int]) -> None:
        self.alive = alive  # automaton index -> unique pattern index (decoys come after: never reported)
        # Patterns of Latin-1 letters only (nearly always) search text encoded as Latin-1, every other letter
        # made "?": one byte a character, so offsets need no conversion (UTF-8's cost a decode between matches).
        self.latin = all(max(patterns[i], default="\x00") < "\u0100" for i in alive)
        self.unsure = {n for n, i in enumerate(alive) if "?" in patterns[i]}  # a "?" may stand for another letter
        codec = ("latin-1", "strict") if self.latin else ("utf-8", "surrogatepass")
        encoded = [patterns[i].encode(*codec) for i in alive]
        # Named, not left to the library: its automatic choice is a DFA for a few patterns, however long.
        self._ways = [BytesAhoCorasick(encoded, implementation=Implementation.ContiguousNFA)]
        if len(encoded) <= _DFA_PATTERNS and max(map(len, encoded), default=0) <= _DFA_LONGEST:
            self._ways.append(BytesAhoCorasick(encoded + _DECOYS, implementation=Implementation.DFA))

    def find(self, data: bytes) -> list[tuple[int, int, int]]:
        """The matches in `data` (the first call times each way and keeps the faster)."""
        if len(self._ways) == 1:
            return self._ways[0].find_matches_as_indexes(data, overlapping=True)
        timed = []
        for way in self._ways:
            started = time.perf_counter()
            found = way.find_matches_as_indexes(data, overlapping=True)
            timed.append((time.perf_counter() - started, way, found))
        _, fastest, found = min(timed, key=lambda t: t[0])
        self._ways = [fastest]
        return found


def scan(
    ranges: Iterable[Range], patterns: Sequence[str], *, fold: bool = False, cap: int | None = None
) -> Iterator[tuple[int, int, int]]:
    """Every occurrence of every pattern in the ranges, overlapping ones included.

    Args:
        ranges: ``(key, text, start, end)`` to search.
        patterns: The strings to find (empty ones and ones holding a NUL are never found).
        fold: Match regardless of case (the patterns are lowered, and so is the text, slice by slice).
        cap: Stop reporting a pattern after this many occurrences.

    Yields:
        ``(pattern index, key, offset in text)``, in text order within each buffer.
    """
    owners: dict[str, list[int]] = {}  # each distinct pattern once in the automaton
    for index, pattern in enumerate(patterns):
        folded = pattern.lower() if fold else pattern
        if folded and _JOIN not in folded:
            owners.setdefault(folded, []).append(index)
    if not owners:
        return
    if not fold and len(owners) <= FEW_PATTERNS:
        yield from _find_few(ranges, owners, cap)
        return
    wanted = list(owners)
    shared = [indexes if len(indexes) > 1 else None for indexes in owners.values()]
    first = [indexes[0] for indexes in owners.values()]
    overlap = max(map(len, wanted)) - 1
    counts = [0] * len(wanted)
    automaton = _Automaton(wanted, list(range(len(wanted))))
    capped = wasted = 0  # patterns past the cap still in the automaton, and their hits since it was built
    halt: threading.Event | None = getattr(_HALT, "event", None)
    for buffer, parts in _buffers(ranges, overlap):
        if halt is not None and halt.is_set():
            raise Halted
        hits = _search(automaton, wanted, buffer, parts, fold)
        if cap is not None:
            kept = []
            for hit in hits:
                unique = hit[0]
                count = counts[unique] = counts[unique] + 1
                if count <= cap:
                    kept.append(hit)
                else:
                    wasted += 1
                    capped += count == cap + 1
            hits = kept
        for unique, key, offset in hits:
            owned = shared[unique]
            if owned is None:
                yield first[unique], key, offset
            else:
                for index in owned:
                    yield index, key, offset
        if capped and capped == len(automaton.alive):
            return
        # A pattern past its cap costs a hit each time it is found, a new automaton its size: it is rebuilt
        # only once those hits have cost more than building it would (each scan stays linear).
        if wasted > max(_REBUILD, len(automaton.alive)):
            remaining = [i for i in automaton.alive if counts[i] <= cap]  # type: ignore[operator]
            automaton = _Automaton(wanted, remaining)
            capped = wasted = 0


def _find_few(ranges: Iterable[Range], owners: dict[str, list[int]], cap: int | None) -> Iterator[tuple[int, int, int]]:
    """`scan` of a few patterns, case and all: ``str.find`` each, over the text as it is (no copy, no encoding:
    a pass over 200 MB at memory speed, where encoding it for the automaton took half a second)."""
    halt: threading.Event | None = getattr(_HALT, "event", None)
    counts = dict.fromkeys(owners, 0)
    for key, text, start, end in ranges:
        if halt is not None and halt.is_set():
            raise Halted
        hits: list[tuple[int, str]] = []
        for pattern in owners:
            at = text.find(pattern, start, end)
            while at >= 0 and (cap is None or counts[pattern] < cap):
                counts[pattern] += 1
                hits.append((at, pattern))
                at = text.find(pattern, at + 1, end)
        hits.sort()
        for at, pattern in hits:
            for index in owners[pattern]:
                yield index, key, at


# A buffer's parts: (offset in the buffer, key, offset in the key's text, characters valid from the part).
_Part = tuple[int, int, int, int]


def _buffers(ranges: Iterable[Range], overlap: int) -> Iterator[tuple[str, list[_Part]]]:
    """The ranges in buffers: short ones joined, long ones sliced; the first buffers small, so that a pattern
    too common to report is capped (and dropped) before it is found a million times."""
    pieces: list[str] = []
    parts: list[_Part] = []
    size = 0
    limit = _FIRST_BUFFER
    for key, text, start, end in ranges:
        if end - start > limit:
            if pieces:
                yield _JOIN.join(pieces), parts
                pieces, parts, size = [], [], 0
            at = start
            while at < end:
                stop = min(end, at + limit + overlap)
                # Matches starting in the overlap are the next slice's (each is reported once).
                yield text[at:stop], [(0, key, at, min(limit, end - at))]
                at += limit
                limit = min(2 * limit, BUFFER)
            continue
        if end <= start:
            continue
        parts.append((size, key, start, end - start))
        pieces.append(text[start:end])
        size += end - start + 1
        if size >= limit:
            yield _JOIN.join(pieces), parts
            pieces, parts, size = [], [], 0
            limit = min(2 * limit, BUFFER)
    if pieces:
        yield _JOIN.join(pieces), parts


def _search(
    automaton: _Automaton, patterns: list[str], buffer: str, parts: list[_Part], fold: bool
) -> list[tuple[int, int, int]]:
    """``(unique pattern, key, offset in the key's text)`` of every match in `buffer`, in buffer order."""
    haystack = buffer.lower() if fold else buffer
    if len(haystack) != len(buffer):
        # Lowering changed lengths (a rare letter such as "İ"): offsets must stay the text's, so use re.
        return list(_search_re(automaton, patterns, buffer, parts))
    alive = automaton.alive
    real = len(alive)  # decoys (control bytes in the text) come after the real patterns
    if automaton.latin:
        found = automaton.find(haystack.encode("latin-1", "replace"))
        if automaton.unsure and found:
            unsure = automaton.unsure
            found = [m for m in found if m[0] not in unsure or haystack.startswith(patterns[alive[m[0]]], m[1])]
    else:
        data = haystack.encode("utf-8", "surrogatepass")
        found = automaton.find(data)
        if found and not haystack.isascii():
            found = _as_characters(found, data, real)
    if not found:
        return []
    if len(parts) == 1:
        _, key, base, valid = parts[0]
        return [(alive[which], key, base + begin) for which, begin, _ in found if which < real and begin < valid]
    starts = [part[0] for part in parts]
    hits = []
    for which, begin, _ in found:
        if which < real:
            part = parts[bisect.bisect_right(starts, begin) - 1]
            inside = begin - part[0]
            if inside < part[3]:
                hits.append((alive[which], part[1], part[2] + inside))
    return hits


def _as_characters(found: list[tuple[int, int, int]], data: bytes, real: int) -> list[tuple[int, int, int]]:
    """Matches with byte offsets made character offsets (counted between neighbouring matches only)."""
    found = sorted((match for match in found if match[0] < real), key=lambda match: match[1])
    byte_at = char_at = 0
    converted = []
    for which, begin, end in found:
        char_at += len(data[byte_at:begin].decode("utf-8", "surrogatepass"))
        byte_at = begin
        converted.append((which, char_at, end))
    return converted


def _search_re(
    automaton: _Automaton, patterns: list[str], buffer: str, parts: list[_Part]
) -> Iterator[tuple[int, int, int]]:
    alive = automaton.alive
    by_text = {patterns[i]: i for i in alive}
    expression = re.compile("|".join(f"(?=({re.escape(patterns[i])}))" for i in alive), re.IGNORECASE)
    starts = [part[0] for part in parts]
    for match in expression.finditer(buffer):
        offset = match.start()
        part = parts[bisect.bisect_right(starts, offset) - 1]
        inside = offset - part[0]
        if inside >= part[3]:
            continue
        for group in match.groups():
            if group is not None and group.lower() in by_text:
                yield by_text[group.lower()], part[1], part[2] + inside
