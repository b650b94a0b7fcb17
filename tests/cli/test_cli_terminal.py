"""Terminal escapes from the input, the model or a file name never reach the user's terminal (issue 24, defect 7).

The real `rlm` console script runs under a pseudo-terminal against the bundled fake OpenAI server, and every
byte the terminal would receive is read from the master side. The only escape sequences allowed there are the
ones rich itself writes (colours, erasing and moving within the progress line, hiding the cursor); the hostile
text must be visible in its escaped form (``\\x1b]52;...``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest

from rlm_adapters.testing import FakeOpenAIServer
from tests.cli.test_cli import RLM_BIN, run_rlm, server_env

pytestmark = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")

# Clipboard write (OSC 52), window title (OSC 0), a hyperlink (OSC 8), clear screen and home (CSI 2J, CSI H),
# the C1 forms of CSI and OSC, a bidi override, a backspace and DEL, and rich markup.
HOSTILE = (
    "start \x1b]52;c;ZXZpbA==\x07 \x1b]0;pwned-title\x07 \x1b]8;;http://evil.example/\x1b\\link\x1b]8;;\x1b\\ "
    "\x1b[2J\x1b[H \x9b2J \x9d0;c1-title\x9c \u202eevil\u202c \x08\x7f [bold red]markup[/bold red] end"
)
ESCAPED = (
    "\\x1b]52;c;ZXZpbA==\\x07",
    "\\x1b]0;pwned-title\\x07",
    "\\x1b]8;;http://evil.example/\\x1b\\link",
    "\\x1b[2J\\x1b[H",
    "\\x9b2J",
    "\\x9d0;c1-title\\x9c",
    "\\u202eevil\\u202c",
    "\\x08\\x7f",
    "[bold red]markup[/bold red]",
)
# What rich writes on a terminal: SGR colours, erase in line, cursor moves, cursor show / hide.
RICH_SEQUENCES = re.compile(rb"\x1b\[[0-9;]*m|\x1b\[[0-2]?K|\x1b\[[0-9]*[ABCDG]|\x1b\[\?25[hl]")
RAW_BYTES = {
    "ESC": b"\x1b",
    "BEL": b"\x07",
    "BS": b"\x08",
    "DEL": b"\x7f",
    "C1": re.compile(b"\xc2[\x80-\x9f]"),
    "bidi override": "\u202e".encode(),
}


def raw_controls(output: bytes) -> list[str]:
    """What in `output` a terminal would act on, beyond rich's own sequences."""
    rest = RICH_SEQUENCES.sub(b"", output)
    found = []
    for name, pattern in RAW_BYTES.items():
        hit = pattern.search(rest) is not None if isinstance(pattern, re.Pattern) else pattern in rest
        if hit:
            found.append(name)
    return found


def visible(output: bytes) -> str:
    """The text a reader sees: rich's sequences dropped, the pty's CR LF as LF."""
    return RICH_SEQUENCES.sub(b"", output).decode("utf-8", "replace").replace("\r\n", "\n")


def run_in_pty(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> tuple[int, bytes]:
    """Run `rlm ARGS` with stdout and stderr on a pseudo-terminal; its exit status and every byte it wrote."""
    assert RLM_BIN is not None
    master, slave = os.openpty()
    # A wide window: no line of the output is wrapped, so the escaped texts stay whole.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 400, 0, 0))
    terminal_env = {**env, "TERM": "xterm-256color", "COLUMNS": "400", "LINES": "50"}
    terminal_env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [RLM_BIN, *args], cwd=cwd, env=terminal_env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the slave side has closed it
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return code, b"".join(chunks)


def hostile_run(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    """A context and model replies full of escapes: the code has them in a comment, the answer is the context."""
    (tmp_path / "notes.txt").write_text(f"{HOSTILE}\n", encoding="utf-8")
    fake_server.root = [
        f"Looking.\n```repl\n# {HOSTILE}\nx = context.strip()\nprint(x)\n```",
        "FINAL_VAR(x)",
    ]


def test_the_self_check_sees_raw_sequences() -> None:
    """The detector this file relies on flags each hostile sequence and passes rich's own."""
    assert raw_controls(HOSTILE.encode()) == list(RAW_BYTES)
    assert raw_controls(b"\x1b[1;31mred\x1b[0m \x1b[2K\x1b[1A\x1b[?25l plain") == []
    assert raw_controls(b"\x1b[2J") == ["ESC"] and raw_controls(b"\x1b]0;t\x07") == ["ESC", "BEL"]


@pytest.mark.parametrize("mode", ["--verbose", "progress"])
def test_rlm_ask_under_a_terminal_shows_escapes_and_passes_none(
    fake_server: FakeOpenAIServer, tmp_path: Path, mode: str
) -> None:
    hostile_run(fake_server, tmp_path)
    flags = ["--verbose"] if mode == "--verbose" else []
    code, output = run_in_pty(
        ["ask", "-c", "notes.txt", "--environment", "local", "--log-dir", "logs", *flags, "what is it?"],
        server_env(fake_server),
        tmp_path,
    )
    shown = visible(output)
    assert code == 0, shown
    assert raw_controls(output) == []
    answer = shown.rstrip("\n").rsplit("\n", 1)[-1]
    assert all(text in answer for text in ESCAPED), answer
    if mode == "--verbose":
        # The code panel (a comment), the output panel (what the cell printed) and the answer panel.
        assert shown.count("\\x1b]52;c;ZXZpbA==\\x07") == 4, shown
        assert shown.count("[bold red]markup[/bold red]") == 4
    else:
        assert "iteration" in shown  # the progress line was drawn on the terminal


@pytest.mark.slow
def test_rlm_view_under_a_terminal_shows_escapes_and_passes_none(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    hostile_run(fake_server, tmp_path)
    done = run_rlm(
        ["ask", "-c", "notes.txt", "--environment", "local", "--log-dir", "logs", "q"],
        server_env(fake_server),
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    for flags in ([], ["--full"]):
        code, output = run_in_pty(["view", "logs", *flags], server_env(fake_server), tmp_path)
        shown = visible(output)
        assert code == 0, shown
        assert raw_controls(output) == []
        assert all(text in shown for text in ESCAPED[:4]), shown
        assert "[bold red]markup[/bold red]" in shown


def test_a_fifo_named_with_escapes_is_skipped_in_a_visible_line(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    # In a folder: "[" would make the name a glob on the command line; no "/", which would split it.
    name = "pipe\x1b]0;fifo-title\x07\x9b2J\u202e[bold]x[red]"
    (tmp_path / "docs").mkdir()
    os.mkfifo(tmp_path / "docs" / name)
    (tmp_path / "docs" / "notes.txt").write_text("plain notes\n")
    fake_server.root = ["FINAL(done)"]
    code, output = run_in_pty(["ask", "-c", "docs", "-q", "q"], server_env(fake_server), tmp_path)
    shown = visible(output)
    assert code == 0, shown
    assert raw_controls(output) == []
    line = "rlm: skipped docs/pipe\\x1b]0;fifo-title\\x07\\x9b2J\\u202e[bold]x[red]: a FIFO (named pipe)"
    assert line in shown, shown
    # A name that cannot be found is refused in one line, escaped too.
    code, output = run_in_pty(["ask", "-c", f"docs/{name}x", "-q", "q"], server_env(fake_server), tmp_path)
    assert code == 2 and raw_controls(output) == [] and "\\x1b]0;fifo-title\\x07" in visible(output)


def test_a_file_name_with_a_newline_cannot_forge_a_line(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    os.mkfifo(tmp_path / "docs" / "a\nrlm: all good")
    (tmp_path / "docs" / "notes.txt").write_text("plain notes\n")
    fake_server.root = ["FINAL(done)"]
    done = run_rlm(["ask", "-c", "docs", "-q", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 0, done.stderr
    assert "rlm: skipped docs/a\\nrlm: all good: a FIFO (named pipe), not a regular file\n" in done.stderr
    assert "\nrlm: all good" not in done.stderr


def test_sources_name_a_hostile_file_escaped(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    name = "report\x1b]0;src-title\x07\u202e.txt"
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / name).write_text("the heron password is TEAL-4471 for the rollout\n")
    (tmp_path / "docs" / "other.txt").write_text("nothing to see here at all\n")
    fake_server.root = [
        "```repl\nhit = [d['text'] for d in context if 'heron' in d['text']][0]\nprint(hit)\n```",
        "FINAL(the heron password is TEAL-4471)",
    ]
    code, output = run_in_pty(
        ["ask", "-c", "docs", "--environment", "local", "--sources", "-q", "q"], server_env(fake_server), tmp_path
    )
    shown = visible(output)
    assert code == 0, shown
    assert raw_controls(output) == []
    assert "- docs/report\\x1b]0;src-title\\x07\\u202e.txt:1" in shown, shown


@pytest.mark.slow
def test_raw_keeps_the_bytes_when_stdout_is_a_pipe(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    hostile_run(fake_server, tmp_path)
    env = server_env(fake_server)
    raw = run_rlm(["ask", "-c", "notes.txt", "--environment", "local", "--raw", "q"], env, tmp_path)
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout == HOSTILE + "\n"
    # Without --raw a pipe gets the escaped text too: raw is only ever asked for.
    escaped = run_rlm(["ask", "-c", "notes.txt", "--environment", "local", "q"], env, tmp_path)
    assert escaped.returncode == 0 and "\x1b" not in escaped.stdout and ESCAPED[0] in escaped.stdout


def test_raw_on_a_terminal_is_refused_before_any_call(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    hostile_run(fake_server, tmp_path)
    code, output = run_in_pty(["ask", "-c", "notes.txt", "--raw", "q"], server_env(fake_server), tmp_path)
    shown = visible(output)
    assert code == 2 and shown.count("\n") == 1, shown
    assert shown.startswith("rlm ask: --raw prints control characters") and "redirect stdout" in shown
    assert fake_server.counters.requests == 0
    both = run_rlm(["ask", "-c", "notes.txt", "--raw", "--json", "q"], server_env(fake_server), tmp_path)
    assert both.returncode == 2 and "--raw and --json do not go together" in both.stderr
    assert fake_server.counters.requests == 0


def test_json_output_carries_the_escapes_as_json(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    hostile_run(fake_server, tmp_path)
    code, output = run_in_pty(
        ["ask", "-c", "notes.txt", "--environment", "local", "--json", "-q", "q"], server_env(fake_server), tmp_path
    )
    assert code == 0 and raw_controls(output) == []
    assert json.loads(visible(output))["response"] == HOSTILE


def test_export_to_a_terminal_passes_no_raw_control_and_loses_nothing(
    fake_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    hostile_run(fake_server, tmp_path)
    env = server_env(fake_server)
    done = run_rlm(["ask", "-c", "notes.txt", "--environment", "local", "--log-dir", "logs", "q"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    code, output = run_in_pty(["export", "logs", "--include-context"], env, tmp_path)
    assert code == 0 and raw_controls(output) == []
    lines = [line for line in visible(output).splitlines() if line.startswith("{")]
    (example,) = [json.loads(line) for line in lines]
    assert example["messages"][-1]["content"] == "FINAL_VAR(x)"
    assert any(HOSTILE in message["content"] for message in example["messages"])
    written = run_rlm(["export", "logs", "--include-context", "-o", "train.jsonl"], env, tmp_path)
    assert written.returncode == 0
    assert json.loads((tmp_path / "train.jsonl").read_text(encoding="utf-8")) == example
