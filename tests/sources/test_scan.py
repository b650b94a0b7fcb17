"""The many-strings scan under the sources: a long repetitive pattern (an answer's exact string) must not
cost what a DFA of it costs; the scan still finds it."""

from __future__ import annotations

import threading
import time

import pytest
from ahocorasick_rs import BytesAhoCorasick, Implementation

from rlm_adapters.sources._scan import Halted, _Automaton, check_halt, halting, scan


def test_a_long_repetitive_pattern_is_built_as_an_nfa_and_still_found() -> None:
    run = "a" * 5_000
    automaton = _Automaton([run, "alpha"], [0, 1])
    assert len(automaton._ways) == 1  # no DFA of it: 5 s of construction, holding the GIL, on the old code
    text = "intro " + "a" * 6_000 + " alpha"
    found = list(scan([(0, text, 0, len(text))], [run, "alpha"], cap=3))
    assert [(which, offset) for which, _, offset in found] == [(0, 6), (0, 7), (0, 8), (1, len(text) - 5)]


def test_the_scans_construction_grows_no_faster_than_the_pattern() -> None:
    """Building the scan's automaton for a 20,000-letter run costs about what the library's NFA costs for it
    (a ratio measured in this test); the DFA the library picks by itself took tens of seconds."""
    run = "b" * 20_000
    started = time.perf_counter()
    _Automaton([run], [0])
    ours = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(5):
        BytesAhoCorasick([run.encode()] * 5, implementation=Implementation.ContiguousNFA)
    baseline = (time.perf_counter() - started) / 5
    assert ours <= 50 * baseline + 0.05


def test_offsets_stay_characters_around_letters_beyond_latin_1_and_a_question_mark_matches_only_itself() -> None:
    """Latin-1 patterns search text encoded as Latin-1 (each other letter becomes "?"): offsets are the text's,
    and "?" in a pattern never stands for another letter."""
    text = "数据 café a€b a?b naïve 数据 café"
    found = sorted((which, offset) for which, _, offset in scan([(0, text, 0, len(text))], ["café", "a?b", "naïve"]))
    assert found == [(0, 3), (0, len(text) - 4), (1, 12), (2, 16)]
    assert all(text.startswith(["café", "a?b", "naïve"][which], offset) for which, offset in found)
    # A pattern beyond Latin-1 is searched in UTF-8, offsets converted the same.
    assert [offset for _, _, offset in scan([(0, text, 0, len(text))], ["数据"])] == [0, len(text) - 7]


def test_a_thread_called_off_stops_at_its_next_look_and_no_other_thread_does() -> None:
    called_off = threading.Event()
    called_off.set()
    text = "alpha beta " * 10
    with halting(called_off):
        with pytest.raises(Halted):
            check_halt()
        with pytest.raises(Halted):
            list(scan([(0, text, 0, len(text))], ["alpha"]))
        # Another thread's scan (another run's sources) is not this one's to stop.
        elsewhere: list[int] = []
        worker = threading.Thread(target=lambda: elsewhere.extend(o for _, _, o in scan([(0, text, 0, 20)], ["beta"])))
        worker.start()
        worker.join()
        assert elsewhere == [6]
    check_halt()  # outside the block, nothing is called off
