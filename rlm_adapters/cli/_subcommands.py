"""The ``rlm`` subcommands, registered by name and help line; each one's module loads when it is parsed.

``rlm --help`` lists every subcommand without importing any of them (the engine, the viewer, the
evaluations and the sandbox probes each take tens of milliseconds to import). A subcommand's parser is a
`LazyCommand`: the first time argparse hands it arguments (``rlm view ...``, ``rlm eval --help``), it
imports the module that owns the subcommand and lets that module's ``add_parser(subparsers)`` fill it in,
exactly as if it had been registered eagerly.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlm_adapters.flag_parser import FlagParser


@dataclass(frozen=True)
class Subcommand:
    """One subcommand: its name, its help line in ``rlm --help``, and the module whose ``add_parser`` adds it.

    Attributes:
        name: What follows ``rlm``.
        help: The line ``rlm --help`` shows (the module's ``add_parser`` must give the same; a test checks).
        module: The module whose `adder` registers it.
        package: The package that must be installed for it (a part missing from this installation is left out).
        adder: The function of `module` called with the ``subparsers`` (``add_parser(subparsers)``).
    """

    name: str
    help: str
    module: str
    package: str
    adder: str = "add_parser"


SUBCOMMANDS: tuple[Subcommand, ...] = (
    Subcommand(
        "ask",
        "answer a question over files far larger than a context window",
        "rlm_adapters.cli.ask",
        "rlm_adapters.cli",
        "add_ask_parser",
    ),
    Subcommand(
        "view",
        "show a trajectory log as a tree, or write it as an HTML page",
        "rlm_adapters.cli.view",
        "rlm_adapters.viewer",
    ),
    Subcommand(
        "export",
        "write trajectories as chat-format JSONL for fine-tuning",
        "rlm_adapters.cli.view",
        "rlm_adapters.viewer",
    ),
    Subcommand(
        "eval",
        "evaluate RLM against baselines on long-context tasks",
        "rlm_adapters.cli.eval",
        "rlm_adapters.evals",
    ),
    Subcommand(
        "serve",
        "serve an RLM as an OpenAI-compatible model (POST /v1/chat/completions)",
        "rlm_adapters.cli.serve",
        "rlm_adapters.serve",
    ),
    Subcommand(
        "keys",
        "add, list, revoke the keys of a shared store, and show what each spent",
        "rlm_adapters.cli.keys",
        "rlm_adapters.cli",
    ),
    Subcommand(
        "doctor", "show the sandbox isolation this machine reaches", "rlm_adapters.cli.doctor", "rlm_adapters.cli"
    ),
)
# What a module's add_parser may set on its subparser beyond the help line (argparse's own options).
_PARSER_OPTIONS = frozenset({"description", "epilog", "formatter_class", "usage"})


class LazyCommand(FlagParser):
    """A subparser that asks its module for its arguments the first time it parses anything (a `FlagParser`:
    a mistyped flag is named with the closest one)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommand: Subcommand | None = None  # None once loaded
        self.siblings: dict[str, LazyCommand] = {}
        self.given_help: str | None = None  # the help line the module's adder passed (checked by a test)

    def load(self) -> None:
        """Import the module that owns this subcommand and let it add the arguments (once)."""
        command, self.subcommand = self.subcommand, None
        if command is None:
            return
        module = importlib.import_module(command.module)
        getattr(module, command.adder)(_Into(self.siblings, command.module))

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self.load()
        return super().parse_known_args(args, namespace)


class _Into:
    """The ``subparsers`` a module's ``add_parser`` is given: hands back the registered parser of each name."""

    def __init__(self, parsers: dict[str, LazyCommand], module: str) -> None:
        self._parsers = parsers
        self._module = module

    def add_parser(self, name: str, **options: Any) -> argparse.ArgumentParser:
        parser = self._parsers.get(name)
        if parser is None:
            raise RuntimeError(f"{self._module}.add_parser adds {name!r}, which SUBCOMMANDS does not list")
        unknown = set(options) - _PARSER_OPTIONS - {"help"}
        if unknown:
            raise RuntimeError(f"{self._module}.add_parser passes {sorted(unknown)} for {name!r}: not supported lazily")
        parser.subcommand = None  # one module may add several subcommands: none of them loads it again
        parser.given_help = options.get("help")
        for key, value in options.items():
            if key != "help":
                setattr(parser, key, value)
        return parser


def add_subcommands(subparsers: Any) -> dict[str, LazyCommand]:
    """Register every installed subcommand on `subparsers` (by name and help line); returns their parsers."""
    parsers: dict[str, LazyCommand] = {}
    for command in SUBCOMMANDS:
        if importlib.util.find_spec(command.package) is None:
            continue  # that part is not in this installation
        parser = subparsers.add_parser(command.name, help=command.help)
        parser.subcommand = command
        parser.siblings = parsers
        parsers[command.name] = parser
    return parsers
