"""`rlm_adapters._terminal`: the one rule for showing untrusted text, and the printers that use it (issue 24, 7)."""

from __future__ import annotations

import argparse
import io
import json
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from rlm_adapters import _terminal
from rlm_adapters._terminal import UNSAFE, escape_controls, json_line, safe_text
from rlm_adapters.cli import doctor
from rlm_adapters.core.engine.console import ConsolePrinter
from rlm_adapters.core.events import BudgetEvent, CellExecuted, RootCall, RunFinished, RunStarted
from rlm_adapters.evals.report import render_table, summarize

ATTACK = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b2J\x9d0;t\x9c\u202eevil\u202c\x00\r\x08\x7f\ud800[bold]x[/bold]"


def terminal() -> Console:
    return Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=300)


def output_of(console: Console) -> str:
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def without_sgr(text: str) -> str:
    """`text` without rich's colour sequences, the only escapes a printer may write itself."""
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("\x1b]0;title\x07", "\\x1b]0;title\\x07"),
        ("a\rb\x08c\x7f", "a\\rb\\x08c\\x7f"),
        ("\x9b2J\x85", "\\x9b2J\\x85"),
        ("\u202eevil\u2066x\u2069\u200f", "\\u202eevil\\u2066x\\u2069\\u200f"),
        ("zero\u200bwidth\ufeff\u2028", "zero\\u200bwidth\\ufeff\\u2028"),
        ("tag\U000e0041\U000e007f", "tag\\U000e0041\\U000e007f"),
        ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
    ],
)
def test_each_kind_of_control_is_shown_as_its_escape(raw: str, shown: str) -> None:
    assert escape_controls(raw) == shown


def test_ordinary_text_is_left_alone() -> None:
    text = "tabs\tand\nnewlines, accents é, CJK 漢字, emoji 👩\u200d👩\u200d👧, ZWNJ می\u200cخواهم, backslash \\x1b"
    assert escape_controls(text) is text
    assert escape_controls("a\tb\nc", one_line=True) == "a\\tb\\nc"


@given(st.text())
def test_nothing_unsafe_survives_and_json_lines_lose_nothing(text: str) -> None:
    for shown in (escape_controls(text), escape_controls(text, one_line=True)):
        assert UNSAFE.search(shown) is None
        assert all(unicodedata.category(c) not in ("Cc", "Cs") or c in "\t\n" for c in shown)
        shown.encode("utf-8")  # a terminal can be sent it
    assert "\n" not in escape_controls(text, one_line=True)
    line = json_line({"text": text})
    assert UNSAFE.search(line) is None and "\n" not in line
    assert json.loads(line) == {"text": text}


def test_rich_text_is_never_markup() -> None:
    console = terminal()
    console.print(safe_text("[bold red]x[/bold red] :smile:"))
    assert without_sgr(output_of(console)).strip() == "[bold red]x[/bold red] :smile:"


def _events() -> list[object]:
    base = {"run_id": "r" * 8 + ATTACK, "depth": 0}
    return [
        RunStarted(
            **base,
            query=ATTACK,
            context_description={"total_chars": 5},
            root_model=ATTACK,
            sub_models=[],
            sandbox="local",
            isolation=ATTACK,
            max_iterations=3,
            max_depth=1,
        ),
        RootCall(
            **base,
            iteration=1,
            messages_sent=[],
            reply=ATTACK,
            model=ATTACK,
            input_tokens=1,
            output_tokens=1,
            cost=0.0,
            duration=0.1,
        ),
        CellExecuted(
            **base, iteration=1, index=1, code=f"# {ATTACK}\nx = 1", output=ATTACK, error=ATTACK, duration=0.1
        ),
        BudgetEvent(**base, resource="cost", used=1.0, limit=2.0, exhausted=False, message=ATTACK),
        RunFinished(
            **base,
            response=ATTACK,
            finish_reason="final",
            iterations=1,
            usage={"total": {"cost": 0.0}},
            duration=0.1,
        ),
    ]


def test_the_verbose_console_escapes_every_text_of_the_run() -> None:
    console = terminal()
    printer = ConsolePrinter(console)
    for event in _events():
        printer(event)  # type: ignore[arg-type]
    printed = without_sgr(output_of(console))
    assert "\x1b" not in printed and "\x07" not in printed and "\x9b" not in printed and "\u202e" not in printed
    assert "\\x1b]52;c;ZXZpbA==\\x07" in printed and "\\ud800" in printed
    assert printed.count("[bold]x[/bold]") >= 6  # rule, model, code, output, error, budget, answer


def test_the_eval_table_shows_names_from_records_escaped() -> None:
    # A row as `summarize` makes it from a results file's records (whose names a file can set to anything).
    record = {"task": ATTACK, "arm": "[bold]rlm[/bold]", "length": 8192, "instance": 0, "status": "ok", "score": 1.0,
              "cost": 0.0, "seconds": 1.0, "input_tokens": 1, "output_tokens": 0}  # fmt: skip
    (row,) = summarize([record])
    console = terminal()
    console.print(render_table([row], title=f"rlm eval {ATTACK}"))
    printed = without_sgr(output_of(console))
    assert "\x1b" not in printed and "\x9b" not in printed
    assert "[bold]rlm[/bold]" in printed and "\\x1b]52" in printed


def test_doctor_escapes_what_it_reports_from_outside(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(doctor, "report", lambda python: (f"python      {python}\nbwrap {ATTACK}", True))
    assert doctor.run_doctor(argparse.Namespace(python="/opt/py\x1b]0;t\x07")) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "/opt/py\\x1b]0;t\\x07" in out and out.count("\n") == 2


@pytest.mark.parametrize("filler", ["a", "é"])  # ASCII (checked as bytes) and not
def test_a_long_text_is_escaped_window_by_window_as_a_short_one_is(filler: str) -> None:
    """Issue 48: a 40 MiB answer is scanned in 1 MiB windows (the regex engine holds the GIL for a whole call);
    what is escaped, at a window's edge or not, is what one call would escape."""
    window = _terminal._WINDOW
    text = filler * (window - 1) + "\x1b" + filler * window + "\u202e\n" + filler * 10 + "\t\x7f"
    assert escape_controls(text) == _terminal.UNSAFE.sub(_terminal._visible, text)
    assert escape_controls(text, one_line=True) == _terminal.UNSAFE_OR_BREAK.sub(_terminal._visible, text)
    clean = filler * (3 * window) + "\n"
    assert escape_controls(clean) is clean
