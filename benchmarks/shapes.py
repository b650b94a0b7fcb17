"""Inputs of every shape sources must stay linear on, and a run over each as the events a run emits.

Issue 47 measured sources on real text, not only on generated trees: Debian's changelogs and the standard
library's source, one line or many, 2 to 40 MB. The shapes here (`SHAPES`):

- ``oneline``: real text (changelogs and the standard library's source, interleaved) with every newline
  turned into a space: one line of any length;
- ``lines``: the same text with its lines;
- ``repetitive``: a log whose records repeat but for their timestamps and counters;
- ``binary``: bytes read as Latin-1 (control characters but NUL, few lines) with stretches of text;
- ``quoting``: the one-line text again, with an answer that quotes 45 passages the run sent to sub-models.

Real text comes from this machine (``/usr/share/doc/*/changelog.Debian.gz`` and the running interpreter's
standard library); where there is none, from `benchmarks.tree`'s generated files. Longer inputs repeat the
text, so they also hold text that stands in several places (identical changelogs of sibling packages do too).

The run (`simulate`) sends `CHUNKS` slices of `CHUNK` characters spread over the input to sub-models, as a
root model that maps over a long text does, prints a short slice, and for ``lines`` prints grep hits; the
answer quotes what those slices hold (`answer`), plus a number no text holds (`MADE_UP`).
"""

from __future__ import annotations

import glob
import gzip
import os
import random
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rlm_adapters.core.events import CellExecuted, Event, RunStarted, SubCallFinished, SubCallSent, SubCallStarted

Shape = Literal["oneline", "lines", "repetitive", "binary", "quoting"]
SHAPES: tuple[Shape, ...] = ("oneline", "lines", "repetitive", "binary", "quoting")
CHUNK = 200_000
CHUNKS = 16
QUOTES = 45
MADE_UP = "8,312,977"
_REAL_LIMIT = 64_000_000  # real text read at most (then repeated)


def real_text(limit: int = _REAL_LIMIT) -> str:
    """Debian's changelogs and the standard library's source, interleaved 100 KB at a time."""
    changelogs: list[str] = []
    total = 0
    for path in sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz")):
        try:
            with gzip.open(path, "rt", encoding="utf-8", errors="replace") as handle:
                changelogs.append(handle.read())
        except OSError:
            continue
        total += len(changelogs[-1])
        if total > limit // 2:
            break
    code: list[str] = []
    total = 0
    for root, folders, files in os.walk(sysconfig.get_paths()["stdlib"]):
        folders[:] = sorted(f for f in folders if f not in ("site-packages", "test", "tests"))
        for name in sorted(files):
            if name.endswith(".py"):
                try:
                    code.append(Path(root, name).read_text(encoding="utf-8"))
                except (OSError, UnicodeDecodeError):
                    continue
                total += len(code[-1])
        if total > limit // 2:
            break
    left, right = "".join(changelogs), "".join(code)
    if not left and not right:
        from benchmarks.tree import Tree  # no real text on this machine: generated files instead

        return "".join(str(d["text"]) for d in Tree(max(1, limit // 1_000_000)).documents())
    step = 100_000
    parts = []
    for at in range(0, max(len(left), len(right)), step):
        parts += [left[at : at + step], right[at : at + step]]
    return "".join(parts)


def _repeat(text: str, size: int) -> str:
    return (text * (size // max(1, len(text)) + 1))[:size]


def _log(size: int) -> str:
    rng = random.Random(47)
    lines = []
    total = 0
    number = 0
    while total < size:
        number += 1
        level = "ERROR" if number % 97 == 0 else "INFO"
        line = (
            f"[2026-12-01T{number // 3600 % 24:02d}:{number // 60 % 60:02d}:{number % 60:02d}.000Z {level}] "
            f"worker-{number % 8} heartbeat ok queue={rng.randrange(4)} latency_ms={rng.randrange(90)}"
        )
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def _binary(size: int) -> str:
    rng = random.Random(47)
    text = real_text(1_000_000)
    parts = []
    total = 0
    while total < size:
        # No NUL: a file holding one is skipped as binary by every loader; binary-ish text is what gets in.
        parts.append(rng.randbytes(4096).replace(b"\x00", b"\x01").decode("latin-1"))
        at = rng.randrange(max(1, len(text) - 1024))
        parts.append(text[at : at + 1024])
        total += 4096 + 1024
    return "".join(parts)[:size]


def make_input(shape: Shape, megabytes: float, real: Callable[[], str] = real_text) -> str:
    """The input of `shape`, about `megabytes` million characters."""
    size = int(megabytes * 1_000_000)
    if shape in ("oneline", "quoting"):
        return _repeat(real(), size).replace("\n", " ")
    if shape == "lines":
        return _repeat(real(), size)
    if shape == "repetitive":
        return _log(size)
    return _binary(size)


def chunk_starts(text: str) -> list[int]:
    """Where the `CHUNKS` slices a run sends to sub-models start, spread over the whole input."""
    starts = list(range(0, len(text), CHUNK))
    step = max(1, len(starts) // CHUNKS)
    return starts[::step][:CHUNKS]


@dataclass(frozen=True)
class Run:
    """A simulated run over an input: its events and its answer.

    Attributes:
        events: What the engine emits, in order.
        answer: The final answer.
        quoted: The passages the answer quotes from text sent to a model (each must be supported).
    """

    events: list[Event]
    answer: str
    quoted: list[str]


def _sub_call(number: int, prompt: str) -> list[Event]:
    ids = {"run_id": "r", "call_id": f"c{number}", "batch_id": "b", "call_kind": "llm_query", "model": "m"}
    return [
        SubCallStarted(**ids, batch_size=1, prompt=prompt),  # type: ignore[arg-type]
        SubCallSent(**ids),  # type: ignore[arg-type]
        SubCallFinished(  # type: ignore[call-arg]
            **ids, response="a summary", error=None, input_tokens=1, output_tokens=1, cost=0.0, duration=0.0
        ),
    ]


def _quote(text: str, at: int, size: int) -> str:
    """About `size` characters of `text` from `at`, verbatim, cut at spaces (empty when no such quote fits)."""
    piece = text[at : at + size]
    start = piece.find(" ") + 1
    end = piece.rfind(" ")
    piece = piece[start:end].strip() if 0 < start < end else ""
    clean = piece.isprintable() and not any(mark in piece for mark in '"`“”')
    return piece if clean and len(piece) >= 20 else ""


def simulate(shape: Shape, text: str) -> Run:
    """The events of a run over `text` of `shape`, and its answer."""
    started = RunStarted(
        run_id="r", query="q", context_description={"type": "str", "preview": text[:400]}, root_model="m",
        sub_models=["m"], sandbox="local", isolation="none", max_iterations=30, max_depth=1,
    )  # fmt: skip
    events: list[Event] = [started]
    starts = chunk_starts(text)
    for number, start in enumerate(starts):
        events += _sub_call(number, f"Summarize this part of a text.\n\n{text[start : start + CHUNK]}")
    shown = text[1000:1300]
    if shape == "lines":
        shown += "\n" + "\n".join([line for line in text[: 4 * CHUNK].splitlines() if "urgency=" in line][:60])
    events.append(CellExecuted(run_id="r", iteration=1, index=1, code="", output=shown, error=None, duration=0.0))
    rng = random.Random(47)
    count = QUOTES if shape == "quoting" else 2
    quoted: list[str] = []
    for _ in range(count * 20):  # a quote with a quote mark in it is skipped: find another
        if len(quoted) == count:
            break
        piece = _quote(text, rng.choice(starts) + rng.randrange(CHUNK - 200), 90)
        if piece:
            quoted.append(piece)
    body = "\n".join(f'- "{q}"' for q in quoted)
    answer = f"The parts sent to sub-models say:\n{body}\nThe total is {MADE_UP}."
    return Run(events, answer, quoted)
