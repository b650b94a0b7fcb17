"""docs/cli.md names every flag of `rlm ask`, short forms too, and no other (issue 37: --schema, --html and
--quiet were missing)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rlm_adapters.cli._ask_flags import add_ask_flags

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def ask_flags() -> set[str]:
    parser = argparse.ArgumentParser()
    add_ask_flags(parser)
    return {option for action in parser._actions for option in action.option_strings}


def test_every_flag_of_rlm_ask_is_in_the_doc_and_the_doc_names_no_other() -> None:
    section = DOC.read_text(encoding="utf-8").split("\n## ", 1)[0]  # the `rlm ask` section
    documented = set(re.findall(r"`(--[a-z][a-z-]*|-[a-zA-Z])\b", section))
    flags = ask_flags() - {"--help", "-h"}
    assert flags - documented == set(), "flags of rlm ask missing from docs/cli.md"
    assert documented - flags == set(), "docs/cli.md names flags rlm ask does not have"
