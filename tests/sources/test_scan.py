"""The many-strings scan under the sources: a long repetitive pattern (an answer's exact string) must not
cost what a DFA of it costs; the scan still finds it."""

from __future__ import annotations

import time

from ahocorasick_rs import BytesAhoCorasick, Implementation

from rlm_adapters.sources._scan import _Automaton, scan


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
