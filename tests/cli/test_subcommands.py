"""`rlm_adapters.cli._subcommands`: subcommands listed by name and help line, each filled in by its module on use."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.cli import _subcommands, build_parser
from rlm_adapters.cli._subcommands import SUBCOMMANDS, LazyCommand, Subcommand, add_subcommands


def _parsers() -> dict[str, LazyCommand]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_top_level_help_lists_every_subcommand_with_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line per subcommand: no word split across lines
    text = " ".join(build_parser().format_help().split())
    for command in SUBCOMMANDS:
        assert command.name in text
        assert " ".join(command.help.split()) in text


def test_each_module_gives_the_help_line_listed_and_fills_in_its_arguments() -> None:
    parsers = _parsers()
    assert set(parsers) == {c.name for c in SUBCOMMANDS}
    assert all(len(p._actions) == 1 for p in parsers.values())  # only -h before use: no module loaded yet
    for name, parser in parsers.items():
        parser.load()
        listed = next(c.help for c in SUBCOMMANDS if c.name == name)
        assert parser.given_help == listed, f"{name}: the module says {parser.given_help!r}"
        assert len(parser._actions) > 1, name
        assert parser.get_default("func") is not None, name


def test_parsing_a_subcommand_loads_it_and_its_defaults_reach_the_namespace() -> None:
    args = build_parser().parse_args(["view", "some.jsonl"])
    assert args.command == "view" and args.run == "some.jsonl"
    assert callable(args.func)


def test_a_module_adding_a_subcommand_not_listed_is_refused_by_name() -> None:
    top = argparse.ArgumentParser()
    subparsers = top.add_subparsers(parser_class=LazyCommand)
    parsers = add_subcommands(subparsers)
    into = _subcommands._Into(parsers, "some.module")
    with pytest.raises(RuntimeError, match=r"some\.module\.add_parser adds 'nope', which SUBCOMMANDS does not list"):
        into.add_parser("nope", help="x")
    with pytest.raises(RuntimeError, match=r"passes \['aliases'\] for 'view'"):
        into.add_parser("view", help="x", aliases=["v"])


def test_a_part_missing_from_the_installation_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = Subcommand("ghost", "not installed", "rlm_adapters.no_such_part.command", "rlm_adapters.no_such_part")
    monkeypatch.setattr(_subcommands, "SUBCOMMANDS", (*SUBCOMMANDS, missing))
    assert "ghost" not in _parsers()
    assert "ask" in _parsers()


def test_a_subcommand_loads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = _subcommands.importlib.import_module

    def counting(name: str, *args: Any) -> Any:
        calls.append(name)
        return real(name, *args)

    monkeypatch.setattr(_subcommands.importlib, "import_module", counting)
    parsers = _parsers()
    parsers["view"].load()
    parsers["export"].load()  # added by the same module's add_parser: already filled in
    parsers["view"].load()
    assert calls == ["rlm_adapters.cli.view"]


def test_the_console_scripts_and_python_m_reach_the_commands() -> None:
    """pyproject's entry points name importable callables, and ``python -m rlm_adapters`` is ``rlm``."""
    scripts = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"rlm", "rlm-mcp"}
    for target in scripts.values():
        module, _, name = target.partition(":")
        assert callable(getattr(importlib.import_module(module), name)), target
    done = subprocess.run([sys.executable, "-m", "rlm_adapters", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: rlm "), done.stderr
