"""`FlagParser`: every command's argparse parser (``rlm`` and its subcommands, ``rlm-mcp``).

A flag it does not know is named in one line with the closest it knows (``unknown flag --contxt; did you mean
--context?``), before argparse would complain of a required flag the typo hid; a misspelt subcommand too; every
other mistake is one line, not argparse's usage block, its control characters escaped. The standard library
and `_terminal` only: ``rlm --help`` loads it.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from rlm_adapters._terminal import escape_controls

# argparse's own test for a negative number, which is a value, never a flag.
_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class FlagParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose errors are one line, and which names a mistyped flag and the closest
    known one before anything else is checked.

    Attributes:
        negative_value: Another shape of value that starts with ``-`` (``--budget -1/day``): such a word is a
            value, never a flag, for this parser (and argparse), as a negative number is.
    """

    negative_value: re.Pattern[str] | None = None

    def _parse_optional(self, arg_string: str) -> Any:
        if self.negative_value is not None and self.negative_value.match(arg_string):
            return None  # argparse's answer for a positional or a value
        return super()._parse_optional(arg_string)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        unknown = self.unknown_flag(given)
        if unknown is not None:
            self.error(self.unknown_message(unknown))
        return super().parse_known_args(given, namespace)

    def unknown_flag(self, args: Sequence[str]) -> str | None:
        """The first of `args` that looks like a flag of this parser and is none (up to ``--``, and before a
        subcommand's name: the subcommand checks its own), or a subcommand's name that is none."""
        commands = self._commands()
        for arg in args:
            if arg == "--":
                return None
            negative = self.negative_value is not None and self.negative_value.match(arg)
            if not arg.startswith("-") or arg == "-" or _NUMBER.match(arg) or negative:
                if commands is not None:
                    # The subcommand's name (what follows is its own), or a misspelt one.
                    return None if arg in commands else arg
                continue
            if not self._knows(arg):
                return arg
        return None

    def _knows(self, arg: str) -> bool:
        known = self._option_string_actions
        if arg.startswith("--"):
            name = arg.partition("=")[0]
            # argparse takes a unique beginning of a long flag (``--max-it``); an ambiguous one it names itself.
            return name in known or (self.allow_abbrev and any(k.startswith(name) for k in known if k[:2] == "--"))
        return arg[:2] in known  # ``-c``, ``-cFILE``, ``-vq``

    def _commands(self) -> list[str] | None:
        """The subcommands' names, when this parser has them."""
        found = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        return list(found[0].choices) if found else None

    def unknown_message(self, arg: str) -> str:
        """``unknown flag --contxt; did you mean --context?``, or where the flags (or commands) are listed."""
        if not arg.startswith("-"):
            commands = self._commands() or []
            close = difflib.get_close_matches(arg, commands, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}?" if close else f"use one of {', '.join(commands)}"
            return f"unknown command {arg!r}; {hint}"
        name = arg.partition("=")[0]
        flags = [k for k in self._option_string_actions if k.startswith("--") and k != "--help"]
        close = difflib.get_close_matches(name, flags, n=1, cutoff=0.75)  # not --bogus for --verbose
        hint = f"did you mean {close[0]}?" if close else f"{self.prog} --help lists the flags"
        return f"unknown flag {name}; {hint}"

    def error(self, message: str) -> NoReturn:
        """Print `message` as one line on stderr and exit with status 2."""
        # A flag or value the user typed is shown, never acted on: ``rlm ask $'--\x1b]0;title\x07'``.
        line = escape_controls(message, one_line=True)
        if line.startswith("unrecognized arguments:"):
            line += f" ({self.prog} --help lists what it takes)"
        self.exit(2, f"{self.prog}: {line}\n")
