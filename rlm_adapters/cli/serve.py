"""`rlm serve`: an OpenAI-compatible Chat Completions server whose model is an RLM.

    rlm serve --model rlm-mini=gpt-5-mini,sub=gpt-5-nano,max_cost=0.50

Listens on 127.0.0.1:8000 by default; any other address needs a token (the clients' API key): ``--token-file
FILE`` (a file only this user may read) or ``RLM_SERVE_TOKEN``; ``--token`` works too, with a warning, as any
local user reads a process's arguments.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import replace
from typing import Any

from rlm_adapters.core import RLMLogger
from rlm_adapters.core.adapter_kit import Declared, flagged
from rlm_adapters.core.cache import is_postgres, open_cache, password_flag_warning, store_keys
from rlm_adapters.errors import CacheError, ConfigurationError, MissingExtraError
from rlm_adapters.flags import (
    add_option_flags,
    ceiling_flag,
    count,
    option_values,
    positive,
    spelled,
    unpriced_lines,
)
from rlm_adapters.http_guard import TokenNames, is_loopback, server_token
from rlm_adapters.serve.served_models import (
    LIMIT_KEYS,
    LIMITS,
    SERVER_CEILINGS,
    Ceilings,
    ServedModel,
    default_model,
    parse_model,
)

HELP = "serve an RLM as an OpenAI-compatible model (POST /v1/chat/completions)"
# The options every run takes as the operator gives them (the limits are ceilings instead): the sandbox, the
# sources' bound, prices, and any other declared with a flag.
RUN_OPTIONS: list[Declared] = [d for d in flagged() if d.option.flag is not None and not d.option.flag.limit]
# Those the server itself holds (`ServeConfig`); the others go to every served model's runs.
SERVER_OPTIONS = ("environment", "sources_timeout")
TOKEN_VARIABLE = "RLM_SERVE_TOKEN"
TOKEN = TokenNames("rlm serve", TOKEN_VARIABLE, f"{TOKEN_VARIABLE}_FILE")


def add_parser(subparsers: Any) -> None:
    """Register ``rlm serve`` on an argparse subparsers object (it sets ``func(args) -> int``)."""
    serve = subparsers.add_parser(
        "serve",
        help=HELP,
        description="Serve POST /v1/chat/completions and GET /v1/models; the model is an RLM over the "
        "conversation, which stays in the sandbox's REPL (docs/serve.md has each client's setup).",
        epilog="--model NAME=ROOT[,sub=SUB][,backend=B][,base_url=URL][,LIMIT=VALUE...]: the served name, its "
        "root model, then key=value items; limits: "
        + ", ".join(LIMIT_KEYS)
        + " (timeout: the older run_timeout); price=INPUT/OUTPUT and sub_price=INPUT/OUTPUT, US dollars per "
        "million tokens. A limit a model leaves out is the server's ceiling (--max-cost, --max-run-timeout, ...), "
        "and no model may set one above it. Without --model, RLM_MODEL (over RLM_SUB_MODEL) is served as 'rlm'.",
    )
    serve.add_argument(
        "--model",
        action="append",
        metavar="NAME=ROOT[,key=value...]",
        default=[],
        help="a served model (repeat for several); e.g. rlm-mini=gpt-5-mini,sub=gpt-5-nano,max_cost=0.50",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; others need a token)"
    )
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help="a file (chmod 600) holding the bearer token the clients send as their API key "
        f"(default: ${TOKEN.file_variable}, else ${TOKEN_VARIABLE})",
    )
    serve.add_argument(
        "--token",
        default=None,
        help="the token itself: visible to every local user in the process list; prefer --token-file or "
        f"${TOKEN_VARIABLE}",
    )
    serve.add_argument(
        "--cache",
        metavar="FILE",
        default=None,
        help="one call cache for every run: a retried request replays the calls that came back",
    )
    serve.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="the store replicas share (postgresql://USER:PASSWORD@HOST/DATABASE, or a file as --cache): the call "
        "cache, so a request retried on any replica replays the calls that came back; on PostgreSQL, also the keys "
        "of rlm keys, each accepted as a client's API key with its budget",
    )
    serve.add_argument("--log-dir", default=None, help="write each run's trajectory JSONL here (see rlm view)")
    serve.add_argument("--max-runs", type=count(1), default=4, help="runs at once (default 4)")
    serve.add_argument(
        "--max-waiting",
        type=int,
        default=8,
        help="requests being read or waiting for a run slot before the next gets 429 (default 8; each holds "
        "up to --max-body-bytes)",
    )
    serve.add_argument(
        "--max-body-bytes", type=count(1), default=64 * 1024 * 1024, help="largest request body (default 64 MiB)"
    )
    serve.add_argument(
        "--send-timeout",
        type=positive,
        default=60.0,
        metavar="S",
        help="seconds one write may wait on a client that reads nothing before it counts as gone (default 60)",
    )
    serve.add_argument(
        "--request-timeout",
        type=positive,
        default=120.0,
        metavar="S",
        help="seconds a client has to send a request's headers, then its body (default 120)",
    )
    serve.add_argument(
        "--no-progress", action="store_true", help="stream no reasoning_content progress, only SSE keep-alive comments"
    )
    add_option_flags(serve, RUN_OPTIONS)
    add_option_flags(
        serve,
        LIMITS.values(),
        rename=ceiling_flag,
        dest=lambda d: f"ceiling_{d.field}",
        defaults=SERVER_CEILINGS.limits(),
        help_default=lambda d, ceiling: f": the ceiling of every run (default {ceiling})",
        metavar="N",
    )
    serve.set_defaults(func=run_serve)


def _with_options(model: ServedModel, given: dict[str, Any]) -> ServedModel:
    """`model` with the run options given as flags (``--price`` under its own ``price`` keys)."""
    options = {k: v for k, v in given.items() if v is not None and k != "prices"}
    prices = {**(given.get("prices") or {}), **model.options.get("prices", {})}
    return replace(model, options={**options, **model.options, **({"prices": prices} if prices else {})})


def run_serve(args: argparse.Namespace) -> int:
    """Run the server until stopped (`serve_until_stopped` gives the exit code); 2 on a bad flag."""
    from rlm_adapters.serve.app import ServeConfig, build_app
    from rlm_adapters.serve.http import protocol
    from rlm_adapters.serve.shutdown import serve_until_stopped

    for flag in ("store", "cache"):  # before the store is opened: a refusal there is no reason to stay silent
        if getattr(args, flag) and (line := password_flag_warning("rlm serve", f"--{flag}", getattr(args, flag))):
            print(line, file=sys.stderr)
    try:
        ceilings = Ceilings(**{d.field: getattr(args, f"ceiling_{d.field}") for d in LIMITS.values()})
        run_options = option_values(args, RUN_OPTIONS)
        given = {k: v for k, v in run_options.items() if k not in SERVER_OPTIONS}
        models = [_with_options(parse_model(spec, ceilings), given) for spec in args.model] or [
            _with_options(default_model(), given)
        ]
        for model in models:
            model.rlm_options(ceilings)  # a missing key fails now, not at the first request
        if args.cache and args.store:
            raise ConfigurationError("--cache and --store both name the call cache: give one")
        cache, _owned = open_cache(args.store or args.cache)
        keys = store_keys(cache) if args.store and is_postgres(args.store) else None  # psycopg: only then
        config = ServeConfig(
            models,
            ceilings,
            environment=args.environment,
            cache=cache,
            logger=RLMLogger(log_dir=args.log_dir) if args.log_dir else None,
            token=server_token(TOKEN, args.token, args.token_file, os.environ),
            host=args.host,
            max_runs=args.max_runs,
            max_waiting=args.max_waiting,
            max_body_bytes=args.max_body_bytes,
            progress=not args.no_progress,
            sources_timeout=run_options["sources_timeout"],
            send_timeout=args.send_timeout,
            request_timeout=args.request_timeout,
            keys=keys,
        )
        app = build_app(config)
    except (ConfigurationError, CacheError, MissingExtraError) as exc:
        print(f"rlm serve: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="rlm serve: %(message)s")
    logging.getLogger("rlm_adapters.serve").setLevel(logging.INFO)  # one line per request; not httpx's
    if args.token:
        print(TOKEN.flag_warning(), file=sys.stderr)
    if not config.token and (config.keys is None or is_loopback(args.host)):  # off loopback every request needs a key
        logging.getLogger("rlm_adapters.serve").warning(
            "serving on %s without a token (--token-file or %s): any local process can spend your model budget",
            args.host,
            TOKEN_VARIABLE,
        )
    if args.environment == "local":
        logging.getLogger("rlm_adapters.serve").warning(
            "%s local runs the model's code in this process: any client whose message steers the "
            "model can run code as you; use it only with trusted clients and inputs",
            spelled(args, "environment"),
        )
    for model in models:  # every run has a cost ceiling, which cannot see an unpriced model's spend
        for key, name in model.priced_by_key().items():
            for line in unpriced_lines([name], model.options.get("prices")):
                logging.getLogger("rlm_adapters.serve").warning("%s, or %s= in --model %s", line, key, model.name)
    names = ", ".join(m.name for m in models)
    print(f"rlm serve: http://{args.host}:{args.port}/v1 serving {names}", file=sys.stderr)
    return serve_until_stopped(app, host=args.host, port=args.port, http=protocol(config.request_timeout))
