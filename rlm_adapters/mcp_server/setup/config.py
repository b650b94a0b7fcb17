"""The server's configuration: command-line flags and environment variables.

Flags win over variables. The run's options are `rlm ask`'s flags, built from their one declaration
(`rlm_adapters.flags`), each with its variable (``--max-depth``: ``RLM_MAX_DEPTH``); ``--timeout`` /
``RLM_TIMEOUT`` are the older names of ``--run-timeout`` / ``RLM_RUN_TIMEOUT`` (the run's wall clock, as
`RLM`'s ``run_timeout``), ``--environment`` of ``--sandbox``, still read. Model settings are
resolved per call (a tool call may name its own model), so a server with no model configured still starts
and lists its tools; the tool then answers with one error that names the variables to set.

| flag | variable | meaning |
|---|---|---|
| ``--root DIR`` (repeatable) | ``RLM_MCP_ROOTS`` (``os.pathsep``-separated) | folders that may be read |
| ``--max-bytes N`` | ``RLM_MCP_MAX_BYTES`` | cap on the total size of the files of one call |
| ``--model`` / ``--sub-model`` | ``RLM_MODEL`` / ``RLM_SUB_MODEL`` | root and sub model |
| ``--backend`` | ``RLM_BACKEND`` | ``openai`` (default), ``anthropic``, ``bedrock``, ... (docs/backends.md) |
| ``--base-url`` | ``OPENAI_BASE_URL`` | any OpenAI-compatible server |
| ``--sandbox`` | ``RLM_SANDBOX`` | ``subprocess`` (default), ``local``, ``docker``, or cloud (docs/sandboxes.md) |
| ``--max-depth`` / ``--max-iterations`` | ``RLM_MAX_DEPTH`` / ``RLM_MAX_ITERATIONS`` | recursion and turns |
| ``--max-cost`` / ``--run-timeout`` | ``RLM_MAX_COST`` / ``RLM_RUN_TIMEOUT`` | ceilings per call (USD, wall-clock s) |
| ``--price MODEL=INPUT,OUTPUT`` | | a model's price, US dollars per million tokens (repeatable) |
| ``--max-sub-calls``, ``--cell-timeout``, ... | ``RLM_MAX_SUB_CALLS``, ... | every other option of ``rlm ask`` |
| ``--log-dir`` | ``RLM_MCP_LOG_DIR`` | where trajectories are written (and served from) |
| ``--http``, ``--host``, ``--port`` | ``RLM_MCP_HOST`` / ``RLM_MCP_PORT`` | streamable HTTP, not stdio |
| ``--token-file FILE`` | ``RLM_MCP_TOKEN_FILE`` | a file (``chmod 600``) holding the bearer token HTTP requests need |
| | ``RLM_MCP_TOKEN`` | the token itself (``--token`` too, warned: every local user reads a process's arguments) |
| ``--allow-client-roots`` | | over HTTP, add the roots a client offers to ``--root`` (stdio always does) |
| ``--max-sessions`` | ``RLM_MCP_MAX_SESSIONS`` | open ``session=`` REPLs, all clients together |
| ``--max-client-sessions`` | ``RLM_MCP_MAX_CLIENT_SESSIONS`` | open ``session=`` REPLs of one client |
| ``--session-idle`` | ``RLM_MCP_SESSION_IDLE`` | seconds without a call before a session closes (0: never) |
| ``--session-lifetime`` | ``RLM_MCP_SESSION_LIFETIME`` | seconds after it opened when a session closes (0: never) |
| ``--cache FILE``, ``--no-cache`` | ``RLM_CACHE`` | call cache: a call repeated after a crash replays what finished |
| ``--store URL`` | ``RLM_STORE`` | call cache, runs, tasks and session records replicas share (``postgresql://...``) |
| ``--max-client-runs`` | ``RLM_MCP_MAX_CLIENT_RUNS`` | ``background`` runs working at once for one client |
| ``--max-runs`` | ``RLM_MCP_MAX_RUNS`` | ``background`` runs working at once, all clients together |
| ``--keep-results`` | ``RLM_MCP_KEEP_RESULTS`` | finished background results kept (the oldest go first) |
| ``--keep-results-for`` | ``RLM_MCP_KEEP_RESULTS_FOR`` | seconds a finished background result is kept |
| ``--transcripts DIR`` | ``RLM_MCP_TRANSCRIPTS`` | turn on ``rlm_recall`` over the Claude Code transcripts in DIR |
| ``--recall-projects`` | ``RLM_MCP_RECALL_PROJECTS`` | whose transcripts: ``current`` project's (default), ``all`` |

``rlm_recall``'s project is ``CLAUDE_PROJECT_DIR`` when set, else the folder the server starts in (Claude Code starts
its MCP servers in the project).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from rlm_adapters.core.adapter_kit import DEFAULTS, Declared
from rlm_adapters.core.sandbox import sandbox_kinds
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.files import DEFAULT_MAX_BYTES
from rlm_adapters.flags import PRICE_FLAG, FlagParser, add_model_flags, add_option_flags, from_environment, variable
from rlm_adapters.hosting import POOL_DEFAULTS, PoolLimits
from rlm_adapters.http_guard import TokenNames, server_token
from rlm_adapters.mcp_server.runs.background import RunLimits
from rlm_adapters.mcp_server.setup.print_config import CLIENTS, LAUNCHERS
from rlm_adapters.model_flags import credentials_problem, model_options

SANDBOX_KINDS = tuple(sandbox_kinds())
# The ceiling of a call's `run_timeout` (the run's wall clock) when the operator sets none: a tool call must end.
DEFAULT_RUN_TIMEOUT = 1800.0
DEFAULT_TIMEOUT = DEFAULT_RUN_TIMEOUT  # its older name
DEFAULT_HEARTBEAT = 3.0
# Not 8000: that is where the README (and vLLM) put a local model server.
DEFAULT_PORT = 8765
# How refusals name the session limits: the flags that set them.
SESSION_FLAGS = {
    "max_sessions": "--max-sessions",
    "max_per_owner": "--max-client-sessions",
    "idle_timeout": "--session-idle",
    "max_lifetime": "--session-lifetime",
}

# How messages name the background-run limits: the flags that set them.
RUN_FLAGS = {
    "max_per_client": "--max-client-runs",
    "max_running": "--max-runs",
    "keep_results": "--keep-results",
    "keep_seconds": "--keep-results-for",
}
RUN_DEFAULTS = RunLimits()
TOKEN = TokenNames("rlm-mcp", "RLM_MCP_TOKEN", "RLM_MCP_TOKEN_FILE")
# Whose transcripts `rlm_recall` reads: the current project's, or every project's (an explicit choice: a
# transcript holds whatever passed through its session, pasted keys included).
RecallProjects = Literal["current", "all"]
RECALL_PROJECTS: tuple[str, ...] = get_args(RecallProjects)


def run_limits(**values: Any) -> RunLimits:
    """The background runs' `RunLimits`, named by the flags (unset values take the defaults)."""
    given = {k: v for k, v in values.items() if v is not None}
    return dataclasses.replace(RUN_DEFAULTS, names=RUN_FLAGS, **given)


def session_limits(**values: Any) -> PoolLimits:
    """The sessions' `PoolLimits`, named by the flags (unset values take `POOL_DEFAULTS`')."""
    given = {k: v for k, v in values.items() if v is not None}
    return dataclasses.replace(POOL_DEFAULTS, names=SESSION_FLAGS, **given)


def default_log_dir() -> Path:
    """Where trajectories go when no folder is configured: the user's cache folder."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rlm-adapters" / "mcp-trajectories"


@dataclass
class ServerConfig:
    """Everything the server needs, resolved from flags and environment.

    Attributes:
        roots: Folders files may be read from (the first one is where relative paths start).
        max_bytes: Cap on the total size of the files one call may read.
        model: Root model (None: ``RLM_MODEL``; missing makes the tool answer with an error).
        sub_model: Sub-model (None: ``RLM_SUB_MODEL``, else the root model).
        backend: Model backend name (None: ``RLM_BACKEND``, else ``openai``).
        base_url: An OpenAI-compatible server's URL (None: ``OPENAI_BASE_URL``).
        api_key: A key for the backend (None: the provider's own variable).
        sandbox: Sandbox kind for the REPL.
        max_depth: Recursion depth ceiling (a call may ask for less).
        max_iterations: Root turns per run.
        max_cost: Money ceiling per call in USD (None: none).
        timeout: The ceiling of a call's ``run_timeout`` (its wall clock) in seconds (``--run-timeout``).
        max_reply_tokens: The most tokens one model reply may hold (``--max-reply-tokens``).
        direct_below_tokens: A call whose text and question are under this many tokens is one plain call to
            the root model instead of an RLM run (``--direct-below-tokens``; None: always the RLM).
        cell_timeout: Seconds one code cell may compute (``--cell-timeout``; None: the sandbox's default).
        log_dir: Folder for trajectories, also served as ``rlm://trajectories/{id}``.
        use_client_roots: Also allow the roots a stdio (or in-process) client offers.
        allow_client_roots: Over HTTP, also allow the roots a client offers (else they are ignored: a
            client must not widen what the operator allowed).
        sessions: Caps and timeouts of the persistent ``session=`` REPLs.
        runs: Caps of the ``background`` runs and how long their results are kept.
        cache: A call cache file (SQLite): every model reply is kept as it returns, so a call repeated after a
            crash or a restart pays only for what had not come back, and ``session=`` names survive a restart.
        store: The store shared by every server naming it (``postgresql://...``): the call cache, background
            runs, MCP tasks and ``session=`` records of every replica (a path is an SQLite file, which holds the
            call cache only). Exclusive with `cache`.
        heartbeat: Seconds between progress notifications while nothing else happens.
        sources_timeout: Seconds a call's sources and claim checks may take once its answer exists (None: no
            bound); what they had not finished is named in the result.
        http: Serve streamable HTTP instead of stdio.
        host: HTTP bind address.
        port: HTTP port.
        token: Bearer token every HTTP request must carry (None: no check).
        environ: The environment model settings are read from (default: the process's).
        transcripts: Claude Code's transcripts folder; given, the ``rlm_recall`` tool is served over it.
        project: The project whose transcripts ``rlm_recall`` reads (``CLAUDE_PROJECT_DIR``, else the folder
            the server started in).
        recall_projects: ``current``: ``rlm_recall`` reads only `project`'s transcripts (its folder under
            `transcripts`, as Claude Code names it); ``all``: every project's.
        options: The run's other options given as flags or variables (``--price``, ``--max-sub-calls``, ...;
            any option declared with a flag), by `RLM` keyword, passed to every call's `RLM`.
    """

    roots: list[Path] = field(default_factory=lambda: [Path.cwd()])
    max_bytes: int = DEFAULT_MAX_BYTES
    model: str | None = None
    sub_model: str | None = None
    backend: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    sandbox: str = DEFAULTS.environment
    max_depth: int = DEFAULTS.max_depth
    max_iterations: int = DEFAULTS.max_iterations
    max_cost: float | None = DEFAULTS.limits.max_cost
    timeout: float = DEFAULT_RUN_TIMEOUT
    max_reply_tokens: int | None = DEFAULTS.max_reply_tokens
    # Off by default: a client calls rlm_query to hand an RLM what it cannot read itself.
    direct_below_tokens: int | None = DEFAULTS.direct_below_tokens
    cell_timeout: float | None = None
    log_dir: Path = field(default_factory=default_log_dir)
    use_client_roots: bool = True
    allow_client_roots: bool = False
    sessions: PoolLimits = field(default_factory=session_limits)
    runs: RunLimits = field(default_factory=run_limits)
    cache: Path | None = None
    store: str | None = None
    heartbeat: float = DEFAULT_HEARTBEAT
    sources_timeout: float | None = DEFAULTS.sources_timeout
    http: bool = False
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    environ: Mapping[str, str] | None = None
    transcripts: Path | None = None
    project: Path = field(default_factory=Path.cwd)
    recall_projects: RecallProjects = "current"
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def run_timeout(self) -> float:
        """The ceiling of a call's wall clock by its `RLM` keyword (``--run-timeout``): the field `timeout`,
        named as `Limits`' own field is."""
        return self.timeout

    def model_kwargs(self, model: str | None = None, sub_model: str | None = None) -> dict[str, Any]:
        """`RLM` backend keyword arguments for one call (the call's own model names win).

        Raises:
            ConfigurationError: when no model is configured; the message names the variables to set.
        """
        options = model_options(
            model=model or self.model,
            sub_model=sub_model or self.sub_model,
            backend=self.backend,
            base_url=self.base_url,
            api_key=self.api_key,
            environ=self.environ,
        )
        # The client's own check speaks of backend_kwargs; the server's user sets flags and variables.
        problem = credentials_problem(options, self.environ)
        if problem is not None:
            raise ConfigurationError(problem)
        return options  # without a sub-model the engine falls back to the root model's own client


def _env_number(env: Mapping[str, str], name: str, kind: type[int] | type[float]) -> Any:
    raw = env.get(name)
    if raw in (None, ""):
        return None
    try:
        return kind(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name}={raw!r} is not a valid {kind.__name__}") from exc


def _help_default(declared: Declared, default: Any) -> str:
    """`` (default: $RLM_MAX_DEPTH or 1)``: the variable read when the flag is not given, then the default."""
    cli = declared.option.flag
    assert cli is not None
    if cli.name == PRICE_FLAG:
        return ""
    fallback = {"run_timeout": f"{DEFAULT_RUN_TIMEOUT:g}"}.get(declared.name, "none" if default is None else default)
    return f" (default: ${variable(cli.name)} or {fallback})"


def build_parser() -> argparse.ArgumentParser:
    """The ``rlm-mcp`` argument parser."""
    parser = FlagParser(
        prog="rlm-mcp",
        description="An MCP server with one tool, rlm_query: a Recursive Language Model over files and text.",
    )
    add = parser.add_argument
    add("--root", action="append", metavar="DIR", help="a folder that may be read (repeatable; default: .)")
    add("--max-bytes", type=int, help=f"cap on the bytes one call may read (default {DEFAULT_MAX_BYTES})")
    add_model_flags(parser)
    # The run's options, each from its declaration; unset ones come from their variables (RLM_MAX_DEPTH, ...).
    add_option_flags(parser, unset=True, help_default=_help_default)
    add("--log-dir", help="trajectory folder (default: $RLM_MCP_LOG_DIR or ~/.cache/rlm-adapters/...)")
    add(
        "--transcripts",
        metavar="DIR",
        help="turn on the rlm_recall tool over the Claude Code session transcripts in DIR "
        "(e.g. ~/.claude/projects, which may not exist yet; default: $RLM_MCP_TRANSCRIPTS, off)",
    )
    add(
        "--recall-projects",
        choices=RECALL_PROJECTS,
        help="whose transcripts rlm_recall reads: current, this project's only (CLAUDE_PROJECT_DIR, else the "
        "folder the server starts in), or all, every project's (default: $RLM_MCP_RECALL_PROJECTS or current)",
    )
    add("--no-client-roots", action="store_true", help="ignore the roots the MCP client offers")
    add(
        "--allow-client-roots",
        action="store_true",
        help="with --http: add the roots a client offers to --root (default: ignored over HTTP)",
    )
    add(
        "--max-sessions",
        type=int,
        help="open session= REPLs, all clients together (default: $RLM_MCP_MAX_SESSIONS or "
        f"{POOL_DEFAULTS.max_sessions})",
    )
    add(
        "--max-client-sessions",
        type=int,
        help=f"open session= REPLs per client (default: $RLM_MCP_MAX_CLIENT_SESSIONS or {POOL_DEFAULTS.max_per_owner})",
    )
    add(
        "--session-idle",
        type=float,
        help="seconds without a call before a session closes, 0 never (default: $RLM_MCP_SESSION_IDLE or "
        f"{POOL_DEFAULTS.idle_timeout:g})",
    )
    add(
        "--session-lifetime",
        type=float,
        help="seconds after its first call when a session closes, 0 never (default: $RLM_MCP_SESSION_LIFETIME or "
        f"{POOL_DEFAULTS.max_lifetime:g})",
    )
    add(
        "--cache",
        metavar="FILE",
        help="keep every model reply in this SQLite file: a call repeated after a crash or restart replays what "
        "had finished, and session= names survive a restart (default: $RLM_CACHE)",
    )
    add("--no-cache", action="store_true", help="no call cache, even when RLM_CACHE is set")
    add(
        "--store",
        metavar="URL",
        help="keep every model reply, background run, task and session= record in this store, shared by every "
        "server naming it (postgresql://USER:PASSWORD@HOST/DATABASE): a call repeated on any of them replays what "
        "had finished, and any of them answers for a run or task; its keys (rlm keys) are accepted as bearer "
        "tokens over --http, each its own principal with its budget (default: $RLM_STORE)",
    )
    add(
        "--max-client-runs",
        type=int,
        help="background runs working at once for one client (default: $RLM_MCP_MAX_CLIENT_RUNS or "
        f"{RUN_DEFAULTS.max_per_client})",
    )
    add(
        "--max-runs",
        type=int,
        help=f"background runs working at once, all clients (default: $RLM_MCP_MAX_RUNS or {RUN_DEFAULTS.max_running})",
    )
    add(
        "--keep-results",
        type=int,
        help=f"finished background results kept (default: $RLM_MCP_KEEP_RESULTS or {RUN_DEFAULTS.keep_results})",
    )
    add(
        "--keep-results-for",
        type=float,
        help="seconds a finished background result is kept (default: $RLM_MCP_KEEP_RESULTS_FOR or "
        f"{RUN_DEFAULTS.keep_seconds:g})",
    )
    add("--http", action="store_true", help="serve streamable HTTP (at /mcp) instead of stdio")
    add("--host", help="HTTP bind address (default: 127.0.0.1)")
    add("--port", type=int, help=f"HTTP port (default: $RLM_MCP_PORT or {DEFAULT_PORT})")
    add(
        "--token-file",
        metavar="FILE",
        help="require 'Authorization: Bearer TOKEN' on HTTP requests, TOKEN read from this file (chmod 600) "
        "(default: $RLM_MCP_TOKEN_FILE, else $RLM_MCP_TOKEN)",
    )
    add(
        "--token",
        help="the token itself: visible to every local user in the process list; prefer --token-file or $RLM_MCP_TOKEN",
    )
    add(
        "--print-config",
        metavar="CLIENT",
        help=f"print this server's registration for an MCP client ({', '.join(CLIENTS)}; json: a .mcp.json) "
        "with the other flags given, then exit",
    )
    add(
        "--launcher",
        choices=LAUNCHERS,
        default="path",
        help="with --print-config: start the server by this installation's absolute path (default), uvx or pipx",
    )
    return parser


def parse_config(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> ServerConfig:
    """Resolve flags and environment variables into a `ServerConfig`.

    Raises:
        ConfigurationError: a value cannot be used (e.g. a root that is not a folder).
    """
    env = os.environ if environ is None else environ
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    env_roots = [r for r in env.get("RLM_MCP_ROOTS", "").split(os.pathsep) if r]
    raw_roots: list[str] = args.root or env_roots or ["."]
    roots = [Path(r).expanduser().resolve() for r in raw_roots]
    for root, raw in zip(roots, raw_roots, strict=True):
        if not root.is_dir():
            raise ConfigurationError(f"--root {raw!r} is not a folder ({root})")
    options = from_environment(args, env)
    max_bytes = args.max_bytes or _env_number(env, "RLM_MCP_MAX_BYTES", int) or DEFAULT_MAX_BYTES
    if max_bytes <= 0:
        raise ConfigurationError(f"--max-bytes {max_bytes!r} must be positive")
    log_dir = args.log_dir or env.get("RLM_MCP_LOG_DIR")
    if args.cache and args.no_cache:
        raise ConfigurationError("--cache and --no-cache contradict each other: give one")
    store = args.store or env.get("RLM_STORE") or None
    if store and (args.cache or args.no_cache):
        raise ConfigurationError(
            f"--store and {'--cache' if args.cache else '--no-cache'} contradict each other: give one"
        )
    cache = None if args.no_cache or store else args.cache or env.get("RLM_CACHE") or None
    if args.allow_client_roots and (args.no_client_roots or not args.http):
        other = "--no-client-roots" if args.no_client_roots else "stdio (no --http), which uses them anyway"
        raise ConfigurationError(f"--allow-client-roots is for --http and contradicts {other}")
    transcripts = args.transcripts or env.get("RLM_MCP_TRANSCRIPTS") or None
    if transcripts is not None:
        folder = Path(transcripts).expanduser()
        # Claude Code makes its projects folder at its first session, after the plugin started this server:
        # a folder not there yet is accepted (rlm_recall says so), one whose parent is missing is a typo.
        if not (folder.is_dir() or (not folder.exists() and folder.parent.is_dir())):
            raise ConfigurationError(
                f"--transcripts {transcripts!r} is not a folder; name Claude Code's projects folder"
            )
    recall_projects = args.recall_projects or env.get("RLM_MCP_RECALL_PROJECTS") or "current"
    if recall_projects not in RECALL_PROJECTS:
        raise ConfigurationError(
            f"RLM_MCP_RECALL_PROJECTS={recall_projects!r} is not one of {', '.join(RECALL_PROJECTS)}"
        )
    project = env.get("CLAUDE_PROJECT_DIR") or ""
    if project and not Path(project).is_absolute():
        raise ConfigurationError(f"CLAUDE_PROJECT_DIR={project!r} is not an absolute path; unset it or fix it")
    return ServerConfig(
        transcripts=Path(transcripts).expanduser().resolve() if transcripts else None,
        project=Path(project) if project else Path.cwd(),
        recall_projects=cast(RecallProjects, recall_projects),
        roots=roots,
        max_bytes=max_bytes,
        model=args.model,
        sub_model=args.sub_model,
        backend=args.backend,
        base_url=args.base_url,
        sandbox=options.pop("environment", DEFAULTS.environment),
        max_depth=options.pop("max_depth", DEFAULTS.max_depth),
        max_iterations=options.pop("max_iterations", DEFAULTS.max_iterations),
        max_cost=options.pop("max_cost", DEFAULTS.limits.max_cost),
        timeout=options.pop("run_timeout", DEFAULT_RUN_TIMEOUT),
        sources_timeout=options.pop("sources_timeout", DEFAULTS.sources_timeout),
        max_reply_tokens=options.pop("max_reply_tokens", DEFAULTS.max_reply_tokens),
        cell_timeout=options.pop("cell_timeout", None),
        direct_below_tokens=options.pop("direct_below_tokens", DEFAULTS.direct_below_tokens),
        options=options,
        log_dir=Path(log_dir).expanduser() if log_dir else default_log_dir(),
        use_client_roots=not args.no_client_roots,
        allow_client_roots=args.allow_client_roots,
        sessions=_sessions(args, env),
        runs=run_limits(
            max_per_client=_first(args.max_client_runs, _env_number(env, "RLM_MCP_MAX_CLIENT_RUNS", int)),
            max_running=_first(args.max_runs, _env_number(env, "RLM_MCP_MAX_RUNS", int)),
            keep_results=_first(args.keep_results, _env_number(env, "RLM_MCP_KEEP_RESULTS", int)),
            keep_seconds=_first(args.keep_results_for, _env_number(env, "RLM_MCP_KEEP_RESULTS_FOR", float)),
        ),
        http=args.http,
        host=args.host or env.get("RLM_MCP_HOST") or "127.0.0.1",
        port=_first(args.port, _env_number(env, "RLM_MCP_PORT", int), DEFAULT_PORT),
        token=server_token(TOKEN, args.token, args.token_file, env),
        cache=Path(cache).expanduser() if cache else None,
        store=store,
        environ=environ,
    )


def _sessions(args: argparse.Namespace, env: Mapping[str, str]) -> PoolLimits:
    """The session limits from flags and variables (0 seconds: no such limit)."""

    def seconds(flag: float | None, variable: str, default: float | None) -> float | None:
        value = _first(flag, _env_number(env, variable, float))
        return default if value is None else (None if value == 0 else value)

    return session_limits(
        max_sessions=_first(args.max_sessions, _env_number(env, "RLM_MCP_MAX_SESSIONS", int)),
        max_per_owner=_first(args.max_client_sessions, _env_number(env, "RLM_MCP_MAX_CLIENT_SESSIONS", int)),
        idle_timeout=seconds(args.session_idle, "RLM_MCP_SESSION_IDLE", POOL_DEFAULTS.idle_timeout),
        max_lifetime=seconds(args.session_lifetime, "RLM_MCP_SESSION_LIFETIME", POOL_DEFAULTS.max_lifetime),
    )


def _first(*values: Any) -> Any:
    """The first value that is not None (flags, then variables, then the default)."""
    return next((v for v in values if v is not None), None)
