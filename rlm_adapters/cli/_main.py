"""The ``rlm`` console script: the parser of every subcommand, each subcommand's module loaded when it runs.

`rlm_adapters.cli.ask` holds ``rlm ask``; the others come from the viewer, the evaluations and the doctor (see
`rlm_adapters.cli._subcommands`). Nothing here imports them: ``rlm --help`` starts in the time of the interpreter.
"""

from __future__ import annotations

import argparse
import sys

from rlm_adapters.cli._subcommands import LazyCommand, add_subcommands
from rlm_adapters.errors import RLMError
from rlm_adapters.flag_parser import FlagParser


def build_parser() -> argparse.ArgumentParser:
    """The ``rlm`` argument parser with every available subcommand."""
    parser = FlagParser(prog="rlm", description="Recursive Language Models from the command line.")
    subparsers = parser.add_subparsers(dest="command", required=True, parser_class=LazyCommand)
    for subparser in add_subcommands(subparsers).values():
        # Lets `main` report an unknown flag with the subcommand's usage, not the top-level one.
        subparser.set_defaults(subparser=subparser)
    return parser


def _one_line(text: str) -> str:
    from rlm_adapters._terminal import escape_controls  # rich's text module: only on an error's path
    from rlm_adapters.core.lm import redact  # an error may quote a model endpoint's URL, credentials and all

    return escape_controls(redact(text), one_line=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlm`` console script."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        owner: argparse.ArgumentParser = getattr(args, "subparser", parser)
        owner.error(f"unrecognized arguments: {_one_line(' '.join(unknown))}")
    try:
        code: int = args.func(args)
    except RLMError as exc:  # FileLoadError and PathNotAllowedError too: one line, no traceback
        print(f"rlm: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlm: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
