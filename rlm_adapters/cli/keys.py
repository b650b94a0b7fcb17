"""`rlm keys`: the keys of a shared PostgreSQL store, each with its budget and its models.

    rlm keys add alice --budget 5/day --models rlm-mini --store postgresql://rlm@db/rlm
    rlm keys list
    rlm keys revoke alice
    rlm keys usage [alice]

``rlm serve --store URL`` and ``rlm-mcp --http --store URL`` take these keys as bearer tokens (docs/scaling.md).
The store is ``--store URL`` or ``RLM_STORE``; ``add`` prints the new key on stdout, alone, once: the store keeps
only its hash.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rlm_adapters.core.cache import is_postgres, password_flag_warning, shown_url, url_password
from rlm_adapters.errors import MissingExtraError, StoreError
from rlm_adapters.flag_parser import FlagParser
from rlm_adapters.flags import positive

HELP = "add, list, revoke the keys of a shared store, and show what each spent"
STORE_VARIABLE = "RLM_STORE"
PERIODS = ("day", "week", "month")
NEGATIVE_BUDGET = re.compile(r"^-[\d.]+/\w*$")


class KeysError(Exception):
    """A bad flag or name: one line, exit 2."""


def budget(text: str) -> tuple[float, str]:
    """An argparse type: ``DOLLARS/PERIOD`` (``5/day``, ``20/week``, ``100/month``)."""
    amount, slash, period = text.partition("/")
    if not slash:
        raise argparse.ArgumentTypeError(f"{text!r} needs a period: DOLLARS/day, DOLLARS/week or DOLLARS/month")
    if period not in PERIODS:
        raise argparse.ArgumentTypeError(f"{text!r}: the period {period!r} is none of day, week, month")
    try:
        return positive(amount), period
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: the dollars {exc}") from None


def models(text: str) -> tuple[str, ...]:
    """An argparse type: served model names, comma-separated."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"{text!r} holds an empty name: give served model names, comma-separated")
    return names


def add_parser(subparsers: Any) -> None:
    """Register ``rlm keys`` and its four commands on an argparse subparsers object."""
    keys = subparsers.add_parser(
        "keys",
        help=HELP,
        description="The keys rlm serve and rlm-mcp --http accept on a PostgreSQL store (--store URL or "
        f"{STORE_VARIABLE}): each key is its own principal, with its own budget and models (docs/scaling.md).",
    )
    keys.set_defaults(func=_run)  # each command sets its own; the parser requires one
    commands = keys.add_subparsers(dest="keys_command", metavar="COMMAND", parser_class=FlagParser, required=True)

    def command(name: str, help: str, run: Callable[[argparse.Namespace, Any], int]) -> FlagParser:
        parser: FlagParser = commands.add_parser(name, help=help, description=help)
        parser.add_argument(
            "--store",
            metavar="URL",
            help=f"the PostgreSQL store (postgresql://USER@HOST/DATABASE; default: ${STORE_VARIABLE})",
        )
        parser.set_defaults(run=run)
        return parser

    add = command("add", "add a key and print it (once: the store keeps only its hash)", _add)
    add.add_argument("name", metavar="NAME", help="the key's name (letters, digits, _.@-)")
    add.negative_value = NEGATIVE_BUDGET  # ``--budget -1/day`` is a value (refused as one), not a flag
    add.add_argument(
        "--budget", type=budget, metavar="DOLLARS/PERIOD", help="what it may spend per day, week or month (UTC)"
    )
    add.add_argument("--models", type=models, metavar="A,B", help="the served models it may use (default: all)")
    command("list", "list the keys: budget, spent this period, models, created, revoked", _list)
    revoke = command("revoke", "revoke a key (servers refuse it within 2 s)", _revoke)
    revoke.add_argument("name", metavar="NAME")
    usage = command("usage", "what each key spent, by model and UTC day", _usage)
    usage.add_argument("name", metavar="NAME", nargs="?", help="one key (default: every key)")


def _run(args: argparse.Namespace) -> int:
    """Open the store, run the command (`args.run`), close the store; 2 with one line on a bad flag or name."""
    prog = f"rlm keys {args.keys_command}"
    run: Callable[[argparse.Namespace, Any], int] = args.run
    try:
        url, flag = (args.store, "--store") if args.store else (os.environ.get(STORE_VARIABLE) or None, STORE_VARIABLE)
        if url is None:
            raise KeysError(f"no store named: give --store postgresql://USER@HOST/DATABASE or set {STORE_VARIABLE}")
        if not is_postgres(url):
            shown = shown_url(url) if url_password(url) else url
            raise KeysError(
                f"{flag} {shown!r} is not a PostgreSQL store: keys and budgets live in PostgreSQL, where every "
                "replica reads them; give postgresql://USER@HOST/DATABASE"
            )
        if args.store and (line := password_flag_warning(prog, "--store", url)):
            print(line, file=sys.stderr)
        from rlm_adapters.core.cache import KeyStore, KeyTaken, PostgresStore, UnknownKey

        database = PostgresStore(url)
        try:
            return run(args, KeyStore(database))
        except KeyTaken:
            raise KeysError(f"NAME {args.name!r} is taken by a key of this store: choose another name") from None
        except UnknownKey:
            raise KeysError(f"NAME {args.name!r} is no key of this store: rlm keys list shows them") from None
        finally:
            database.close()
    except (KeysError, StoreError, MissingExtraError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2


def _add(args: argparse.Namespace, keys: Any) -> int:
    dollars, period = args.budget if args.budget else (None, None)
    try:
        secret = keys.add(args.name, dollars, period, args.models)
    except ValueError as exc:
        raise KeysError(f"NAME: {exc}") from None
    print(secret)
    return 0


def _list(args: argparse.Namespace, keys: Any) -> int:
    rows = [("NAME", "BUDGET", "SPENT THIS PERIOD", "MODELS", "CREATED", "REVOKED")]
    for key in keys.standings():
        rows.append(
            (
                key.name,
                key.budget_words(),
                f"${key.spent:,.4f}",
                ",".join(key.models) if key.models is not None else "all",
                key.created_at.strftime("%Y-%m-%d %H:%M"),
                key.revoked_at.strftime("%Y-%m-%d %H:%M") if key.revoked_at else "-",
            )
        )
    _table(rows)
    return 0


def _revoke(args: argparse.Namespace, keys: Any) -> int:
    revoked = keys.revoke(args.name)
    word = "revoked" if revoked else "was revoked already"
    print(f"rlm keys revoke: key {args.name!r} {word}; servers refuse it within 2 s", file=sys.stderr)
    return 0


def _usage(args: argparse.Namespace, keys: Any) -> int:
    found = keys.usage(args.name)
    rows = [("NAME", "DAY", "MODEL", "CALLS", "CUT", "INPUT TOKENS", "OUTPUT TOKENS", "DOLLARS")]
    for row in found:
        rows.append(
            (
                row.name,
                row.day.isoformat(),
                row.model,
                str(row.calls),
                str(row.cut_calls),
                f"{row.input_tokens:,}",
                f"{row.output_tokens:,}",
                f"${row.dollars:,.4f}",
            )
        )
    _table(rows)
    return 0


def _table(rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
