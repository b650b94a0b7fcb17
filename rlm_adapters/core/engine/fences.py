"""Fenced code blocks as real models write them: which run, and what the model is told about the rest.

Read line by line with CommonMark's rules, which a regex pairing any two fence lines got wrong: a block opens
with three or more backticks (or tildes) and an optional language tag, and only a *bare* fence of the same
character, at least as long, closes it (a closing fence carries no tag). Beyond that, what small and local
models do (seen on a real 135M model, 8 of 8 turns in one run):

- a doubled opening fence (```` ```python ```` twice, or a bare fence then a tagged one) opens one block;
- a block still open at the end of the reply runs when the reply was not cut at its token cap and the code
  compiles; otherwise it is named and does not run;
- an empty block, a block whose language tag does not run (```` ```bash ````), and a tilde fence are named to
  the model instead of passing in silence.

`scan` returns the runnable blocks and those notes; `find_code_blocks` (`parsing.py`) is its list of code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Literal

# ```lang / ~~~lang, indented at most three spaces (CommonMark); group 1 the fence, group 2 the info string.
_FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^`\n]*?)[ \t]*$")
# What a tag is read as: its first word, lower case, without the braces or dot of ``{python}`` / ``.python``.
_TAG = re.compile(r"[{.]*([\w+.-]*)")
_LINES = re.compile(r"[^\n]*\n|[^\n]+\Z")

Kind = Literal["run", "empty", "other_language", "tilde", "unclosed_cut", "unclosed_broken"]


@dataclass(frozen=True)
class Block:
    """One fenced block of a reply.

    Attributes:
        code: Its text (each line ending in a newline, as written).
        tag: Its language tag as read ("" for none).
        kind: ``run`` (it runs), or why it does not.
        start: Where it starts in the reply (its opening fence's first character).
        end: Where it ends (after its closing fence's line; the reply's end when unclosed).
        closed: Whether a closing fence ended it.
        note: For a block that runs though it was not closed, or one that does not run: what the model is told.
    """

    code: str
    tag: str
    kind: Kind
    start: int
    end: int
    closed: bool
    note: str = ""


@dataclass
class Scan:
    """The blocks of one reply, in order, and the notes for the model."""

    blocks: list[Block] = field(default_factory=list)

    @property
    def code(self) -> list[str]:
        """The code of each block that runs, in order."""
        return [b.code for b in self.blocks if b.kind == "run"]

    @property
    def notes(self) -> list[str]:
        """One line for each block that needs saying (it did not run, or ran though unclosed)."""
        return [b.note for b in self.blocks if b.note]


def read_tag(info: str) -> str:
    """A fence's language tag as the engine reads it: the first word of its info string, lower case."""
    match = _TAG.match(info.strip().lower())
    return match.group(1) if match else ""


def scan(reply: str, runnable: frozenset[str], *, truncated: bool = False) -> Scan:
    """The fenced blocks of `reply`: which run (their tag in `runnable`) and why the others do not.

    Args:
        reply: The model's reply.
        runnable: The language tags whose blocks run ("" for a bare fence).
        truncated: The reply was cut at its token cap: a block left open at its end is cut code and never runs.
    """
    result = Scan()
    # Lines end at "\n" only: a U+2028 inside a string literal is part of the code, not a line break.
    lines = _LINES.findall(reply)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    index = 0
    while index < len(lines):
        opening = _FENCE_LINE.match(lines[index].rstrip("\r\n"))
        if opening is None:
            index += 1
            continue
        fence, tag = opening.group(1), read_tag(opening.group(2))
        body_start = index + 1
        # A doubled opening fence: fence lines with a tag (or of the same kind) before any code open one block.
        while body_start < len(lines):
            again = _FENCE_LINE.match(lines[body_start].rstrip("\r\n"))
            if again is None or again.group(1)[0] != fence[0] or not again.group(2).strip():
                break
            tag = tag or read_tag(again.group(2))
            body_start += 1
        close = _closing(lines, body_start, fence)
        body = "".join(lines[body_start : len(lines) if close is None else close])
        end = offsets[-1] if close is None else offsets[close + 1]
        result.blocks.append(_block(body, tag, fence, offsets[index], end, close is not None, runnable, truncated))
        index = len(lines) if close is None else close + 1
    return result


def _closing(lines: list[str], start: int, fence: str) -> int | None:
    """The line that closes a block opened by `fence`: a bare fence of its character, at least as long."""
    for index in range(start, len(lines)):
        match = _FENCE_LINE.match(lines[index].rstrip("\r\n"))
        if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) and not match.group(2):
            return index
    return None


def _block(
    code: str, tag: str, fence: str, start: int, end: int, closed: bool, runnable: frozenset[str], truncated: bool
) -> Block:
    shown = f"{fence}{tag}"
    if fence[0] == "~":
        note = f"A {shown} block did not run: only ``` fences run."
        return Block(code, tag, "tilde", start, end, closed, note if code.strip() and tag in runnable else "")
    if tag not in runnable:
        tags = ", ".join(f"```{t}" for t in sorted(runnable) if t) or "```"
        return Block(code, tag, "other_language", start, end, closed, f"A {shown} block did not run: only {tags} run.")
    if not code.strip():
        if not closed:
            return Block(code, tag, "empty", start, end, closed)  # a lone fence at the end: nothing was written
        note = f"A {shown} block was empty: nothing ran. Put the code between one opening and one closing fence."
        return Block(code, tag, "empty", start, end, closed, note)
    if closed:
        return Block(code, tag, "run", start, end, closed)
    if truncated:
        note = (
            f"Your reply was cut before its last {shown} block was closed: that block did not run. "
            "Write shorter replies: one block, closed."
        )
        return Block(code, tag, "unclosed_cut", start, end, closed, note)
    try:
        ast.parse(code)
    except (SyntaxError, ValueError) as exc:
        why = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        note = f"Your last {shown} block was never closed and does not compile ({why}): it did not run."
        return Block(code, tag, "unclosed_broken", start, end, closed, note)
    note = f"Your last {shown} block was never closed; it ran as written. Close each block with ```."
    return Block(code, tag, "run", start, end, closed, note)
