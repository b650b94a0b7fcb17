"""What ``rlm ask`` prints on stdout: the answer and its sources, escaped, or raw with ``--raw``.

By default the answer goes through `escape_controls` whether stdout is a terminal or a pipe (a pipe often
ends in one: ``rlm ask ... | less -R``, ``echo "$(rlm ask ...)"``). ``--raw`` keeps the model's characters
as they are, and is refused when stdout is a terminal, which would act on them.
"""

from __future__ import annotations

import sys
from dataclasses import replace

from rlm_adapters._terminal import escape_controls
from rlm_adapters.core import RLMResult
from rlm_adapters.sources import sources_block


def raw_problem(*, raw: bool, json: bool) -> str | None:
    """Why ``--raw`` cannot be honoured (stdout is a terminal, or ``--json`` is asked for); None when it can."""
    if not raw:
        return None
    if json:
        return "--raw and --json do not go together: --json prints escaped JSON; drop one of them"
    if sys.stdout.isatty():
        return (
            "--raw prints control characters from the input and the model as they are, which a terminal would "
            "act on: redirect stdout to a file or a pipe, or drop --raw"
        )
    return None


def print_answer(result: RLMResult, *, sources: bool, raw: bool, answer: bool = True) -> None:
    """Print the answer (and with `sources` its ``Sources:`` block) on stdout.

    Args:
        result: The run's result.
        sources: Add the ``Sources:`` block and its ``Unsupported:`` line (each file name escaped on one line,
            so none can forge a line).
        raw: Print the characters as they are (the caller has checked `raw_problem`: stdout is no terminal).
        answer: Print the answer itself (False: it was printed the moment it existed; the block only).
    """
    text = result.response if answer else ""
    if sources:
        cited = [s if raw else replace(s, path=_one_line(s.path)) for s in result.sources]
        # An unsupported claim's reason can name a file too ("in the input (path:line) but ...").
        claims = [c if raw or c.reason is None else replace(c, reason=_one_line(c.reason)) for c in result.claims]
        note = result.sources_note or "none were computed"
        block = sources_block(cited, claims, note) or f"Sources: none ({note})"
        text = f"{text}\n\n{block}" if answer else f"\n{block}"
    write_text(text + "\n", raw=raw)


def write_text(text: str, *, raw: bool) -> None:
    """Write `text` on stdout as it is (`raw`) or escaped, and flush (a streamed piece of the answer, too)."""
    # Raw: lone surrogates (model code can print them) have no UTF-8 form, so they are written as their escape,
    # the rest as is. Through sys.stdout, which the local sandbox may have replaced by its router (no `.buffer`).
    text = text.encode("utf-8", "backslashreplace").decode("utf-8") if raw else escape_controls(text)
    sys.stdout.write(text)
    sys.stdout.flush()


def _one_line(text: str) -> str:
    return escape_controls(text, one_line=True)
