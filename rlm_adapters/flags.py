"""The flags of every command (``rlm ask``, ``rlm serve``, ``rlm eval``, ``rlm view``, ``rlm-mcp``), in one place.

- `FlagParser` (`rlm_adapters.flag_parser`, which ``rlm --help`` loads without the engine): the argparse parser
  of each of them. A flag it does not know is named in one line with the closest it knows (``unknown flag
  --contxt; did you mean --context?``), before argparse would complain of a required flag the typo hid.
- `add_option_flags`: the flags of the run's options, built from their one declaration (`core.settings`:
  ``option(..., flag=Flag(...))`` and `Limits`' metadata): the name, older names, type, minimum and help of each.
  ``rlm ask`` and ``rlm eval`` offer them as they are, ``rlm-mcp`` with its environment variables
  (`from_environment`), ``rlm serve`` as the ceilings of every run (`ceiling_flag`).
- `parse_price`: ``--price MODEL=INPUT,OUTPUT`` (US dollars per million tokens); `unpriced_lines`: what a
  command says, before the first call, of a model a cost cap cannot see.
- `add_model_flags`: ``--model``, ``--sub-model``, ``--backend``, ``--base-url``.

The engine's face, the errors and `model_flags` only: the CLI, ``rlm serve`` and ``rlm-mcp`` share it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rlm_adapters.core.adapter_kit import Declared, flagged, unpriced_models
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.flag_parser import FlagParser as FlagParser  # every command's parser, re-exported
from rlm_adapters.model_flags import BACKEND_HELP, CLI_BACKENDS

Parse = Callable[[str], Any]


# -- value types ----------------------------------------------------------------------------------
def count(minimum: int) -> Parse:
    """An argparse type: an integer of at least `minimum` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum of {minimum}")
        return value

    return parse


def positive(text: str) -> float:
    """An argparse type: a number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0")
    return value


def positive_or_off(text: str) -> float:
    """An argparse type: a number above zero, or 0 for none (`option_values` makes it None; a None here would
    read as a flag not given)."""
    if text.strip() in ("0", "0.0"):
        return 0.0
    try:
        return positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} must be above 0 (or 0 for no bound)") from None


def parse_price(text: str) -> tuple[str, tuple[float, float]]:
    """``MODEL=INPUT,OUTPUT`` (US dollars per million input and output tokens) as ``(model, (input, output))``.

    Raises:
        argparse.ArgumentTypeError: naming the value and the form it must take.
    """
    model, sep, numbers = text.rpartition("=")
    parts = numbers.split(",")
    try:
        pair = tuple(float(p) for p in parts)
    except ValueError:
        pair = ()
    if not sep or not model.strip() or len(pair) != 2 or not all(math.isfinite(p) and p >= 0 for p in pair):
        raise argparse.ArgumentTypeError(
            f"{text!r} must be MODEL=INPUT,OUTPUT in US dollars per million tokens, e.g. gpt-5-mini=0.25,2.00"
        )
    return model.strip(), (pair[0], pair[1])


class _Prices(argparse.Action):
    """Collects repeated ``--price`` values into one ``{model: (input, output)}`` (the last one of a model wins)."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, flag: str | None = None
    ) -> None:
        model, pair = values
        table = dict(getattr(namespace, self.dest, None) or {})
        table[model] = pair
        setattr(namespace, self.dest, table)


class _Spelled(argparse.Action):
    """Stores the value and which of the option's flags gave it."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, flag: str | None = None
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_flag", flag)


def value_type(declared: Declared) -> Parse:
    """What reads one value of `declared`'s flag: a price, a whole number of at least its minimum, a number
    above 0 (or 0 for none, when its flag says so)."""
    cli = declared.option.flag
    assert cli is not None
    if cli.name == PRICE_FLAG:
        return parse_price
    if declared.type.startswith("int"):
        return count(cli.minimum)
    return positive_or_off if cli.off else positive


PRICE_FLAG = "--price"


# -- the builders ---------------------------------------------------------------------------------
def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that choose the models (`rlm_adapters.model_flags` reads them with the environment)."""
    parser.add_argument("--model", help="root model (default: $RLM_MODEL)")
    parser.add_argument("--sub-model", help="sub-model for llm_query (default: $RLM_SUB_MODEL, else the root model)")
    parser.add_argument("--backend", choices=CLI_BACKENDS, help=BACKEND_HELP)
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL)")


def add_option_flags(
    parser: argparse.ArgumentParser,
    options: Iterable[Declared] | None = None,
    *,
    unset: bool = False,
    rename: Callable[[str], str] | None = None,
    dest: Callable[[Declared], str] | None = None,
    defaults: Mapping[str, Any] | None = None,
    help_default: Callable[[Declared, Any], str] | None = None,
    metavar: str | None = None,
) -> None:
    """Add the flags of the run's options that declare one (`flagged`), each from its declaration.

    An integer option takes a whole number of at least its minimum, a number one above 0, a choice one of its
    choices, ``--price`` ``MODEL=INPUT,OUTPUT`` (repeatable). Older flags (``--timeout`` for ``--run-timeout``)
    are accepted too; `spelled` says which one a command line used.

    Args:
        parser: Where to add them.
        options: Which options (default: every flagged one).
        unset: Default None, so the caller can tell a flag given from one left out (``rlm-mcp`` then reads
            its variable, ``rlm serve`` its ceiling).
        rename: Makes each flag's name from the declared one (``rlm serve``'s ``--max-run-timeout``).
        dest: The attribute of each (default: the option's keyword).
        defaults: Defaults that replace the declared ones (``rlm serve``'s ceilings), by keyword.
        help_default: The help's ``(default: ...)`` text of an option and its default.
        metavar: How the help names each value (default: argparse's, from `dest`).
    """
    for declared in flagged() if options is None else options:
        cli = declared.option.flag
        assert cli is not None
        default = (defaults or {}).get(declared.name, declared.default)
        shown = help_default(declared, default) if help_default is not None else _shown(default)
        names = tuple((rename or str)(name) for name in (cli.name, *cli.aliases))
        common: dict[str, Any] = {
            "dest": dest(declared) if dest is not None else declared.name,
            "default": None if unset else default,
            "help": cli.help + shown,
        }
        if metavar is not None and cli.choices is None and cli.name != PRICE_FLAG:
            common["metavar"] = metavar
        if cli.name == PRICE_FLAG:
            parser.add_argument(*names, type=parse_price, action=_Prices, metavar="MODEL=INPUT,OUTPUT", **common)
            continue
        if cli.aliases:
            common["action"] = _Spelled
        if cli.choices is not None:
            parser.add_argument(*names, choices=cli.choices(), **common)
        else:
            parser.add_argument(*names, type=value_type(declared), **common)


def _shown(default: Any) -> str:
    return "" if default is None or default == {} else f" (default: {default})"


def spelled(args: argparse.Namespace, keyword: str) -> str:
    """The flag a command line set option `keyword` with (its own name when it used none or that)."""
    declared = next(d for d in flagged() if d.name == keyword)
    assert declared.option.flag is not None
    return str(getattr(args, f"{keyword}_flag", None) or declared.option.flag.name)


def option_values(args: argparse.Namespace, options: Iterable[Declared] | None = None) -> dict[str, Any]:
    """The `RLM` keywords of the flags `add_option_flags` made, as parsed (0 of a flag that takes it for
    "none" is None)."""
    return {d.name: _kept(d, getattr(args, d.name)) for d in (flagged() if options is None else options)}


def _kept(declared: Declared, value: Any) -> Any:
    off = declared.option.flag is not None and declared.option.flag.off
    return None if off and value == 0 else value


def variable(flag: str) -> str:
    """The environment variable of a flag: ``--max-depth`` -> ``RLM_MAX_DEPTH``."""
    return "RLM_" + flag.lstrip("-").upper().replace("-", "_")


def option_variables() -> list[str]:
    """Every variable `from_environment` reads, in declaration order (``RLM_MAX_DEPTH``, ``RLM_TIMEOUT``, ...)."""
    return [
        variable(name)
        for d in flagged()
        if d.option.flag is not None and d.option.flag.name != PRICE_FLAG
        for name in (d.option.flag.name, *d.option.flag.aliases)
    ]


def from_environment(
    args: argparse.Namespace, environ: Mapping[str, str], options: Iterable[Declared] | None = None
) -> dict[str, Any]:
    """Each flagged option's value: its flag's (when given, `add_option_flags(..., unset=True)`), else its
    variable's (``RLM_MAX_DEPTH``; an older flag's variable, ``RLM_TIMEOUT``, after the new one's), checked as
    the flag is; options set by neither are left out. ``--price`` has no variable.

    Raises:
        ConfigurationError: a variable's value the flag would refuse, naming the variable.
    """
    values: dict[str, Any] = {}
    for declared in flagged() if options is None else options:
        cli = declared.option.flag
        assert cli is not None
        given = getattr(args, declared.name, None)
        if given is not None:
            values[declared.name] = _kept(declared, given)
            continue
        if cli.name == PRICE_FLAG:
            continue
        for name in map(variable, (cli.name, *cli.aliases)):
            raw = environ.get(name)
            if raw in (None, ""):
                continue
            values[declared.name] = _kept(declared, _variable_value(declared, name, raw))
            break
    return values


def _variable_value(declared: Declared, name: str, raw: str) -> Any:
    cli = declared.option.flag
    assert cli is not None
    if cli.choices is not None:
        if raw not in cli.choices():
            raise ConfigurationError(f"{name}={raw!r} is not one of {cli.choices()}")
        return raw
    try:
        return value_type(declared)(raw)
    except argparse.ArgumentTypeError as exc:
        raise ConfigurationError(f"{name}={raw!r}: {exc}") from None


def unpriced_lines(models: Iterable[str], prices: Mapping[str, Any] | None) -> list[str]:
    """One line for each of `models` with no known price, worded for the command line: said before the first
    call, as a cost cap cannot see such a model's spend (call it only when a cap is set)."""
    return [
        f"no price known for model {model!r}: its calls cost 0, so --max-cost cannot stop them; give "
        f"{PRICE_FLAG} {model}=INPUT,OUTPUT (US dollars per million tokens)"
        for model in unpriced_models(models, prices)
    ]


def ceiling_flag(flag: str) -> str:
    """``rlm serve``'s flag for the ceiling of an option's flag: ``--max-cost`` stays, ``--run-timeout`` is
    ``--max-run-timeout``."""
    return flag if flag.startswith("--max-") else "--max-" + flag.removeprefix("--")


__all__ = [
    "PRICE_FLAG",
    "FlagParser",
    "add_model_flags",
    "add_option_flags",
    "ceiling_flag",
    "count",
    "from_environment",
    "option_values",
    "option_variables",
    "parse_price",
    "positive",
    "positive_or_off",
    "spelled",
    "unpriced_lines",
    "value_type",
    "variable",
]
