"""The ``rlm`` command: ``rlm ask`` (`ask`), ``rlm doctor`` (`doctor`), and the parser of every subcommand.

This face loads only the parser (`_main`): each subcommand's module is imported when it runs, so that
``rlm --help`` starts in the time of the interpreter. The console script is `main`.
"""

from rlm_adapters.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
