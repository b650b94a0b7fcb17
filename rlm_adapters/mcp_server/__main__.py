"""``rlm-mcp`` / ``python -m rlm_adapters.mcp_server``: start the MCP server (stdio unless ``--http``), or
with ``--print-config CLIENT`` print its registration for an MCP client (`client_configs`)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Sequence

import anyio
from mcp.server.mcpserver import MCPServer

from rlm_adapters.core.adapter_kit import close_shielded
from rlm_adapters.core.cache import password_flag_warning
from rlm_adapters.core.tracing import configure_from_environment
from rlm_adapters.errors import CacheError, ConfigurationError, MissingExtraError, RLMError, StoreError
from rlm_adapters.mcp_server.runs.background import RunBook
from rlm_adapters.mcp_server.server import build_server, run_book
from rlm_adapters.mcp_server.setup.config import TOKEN, ServerConfig, build_parser, parse_config
from rlm_adapters.mcp_server.setup.print_config import print_config
from rlm_adapters.mcp_server.transports import check_exposure, serve_http, serve_stdio


def server_flags(argv: Sequence[str] | None) -> list[str]:
    """The flags to register: those given, without the printing ones (default ``--root .``)."""
    given = list(sys.argv[1:] if argv is None else argv)
    kept: list[str] = []
    skip = False
    for item in given:
        if skip:
            skip = False
        elif item in ("--print-config", "--launcher"):
            skip = True
        elif not item.startswith(("--print-config=", "--launcher=")):
            kept.append(item)
    return kept or ["--root", "."]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse flags and environment, then serve until the client disconnects (or Ctrl-C).

    Returns:
        The process exit status.
    """
    # stdout carries the protocol on stdio: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s rlm-mcp %(levelname)s %(message)s")
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2"):
        # One INFO line per model request drowns the server's own log.
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # A store that went away is one warning of ours (`PostgresStore`), not one of the pool's per reconnection.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        config = parse_config(argv)
    except ConfigurationError as exc:
        print(f"rlm-mcp: {exc}", file=sys.stderr)
        return 2
    flags = build_parser().parse_args(argv)
    if flags.token and not flags.print_config:
        print(TOKEN.flag_warning(), file=sys.stderr)
    if flags.store and (line := password_flag_warning("rlm-mcp", "--store", flags.store)):
        print(line, file=sys.stderr)
    if flags.print_config:
        return print_config(
            flags.print_config, server_flags(argv), os.environ, launcher=flags.launcher, timeout=config.run_timeout
        )
    if config.http:
        try:
            check_exposure(config)  # refused before anything starts; serve_http logs the loopback warning
        except ConfigurationError as exc:
            print(f"rlm-mcp: {exc}", file=sys.stderr)
            return 2
    try:
        configure_from_environment("rlm-mcp")  # RLM_TRACING=otlp|console: spans of every run (docs/tracing.md)
    except RLMError as exc:
        print(f"rlm-mcp: {exc}", file=sys.stderr)
        return 2
    stopping = threading.Event()
    try:
        runs = run_book(config)
        server = build_server(config, runs, stopping=stopping)
    except (CacheError, ConfigurationError, MissingExtraError) as exc:
        if config.store is not None:
            source = "--store" if flags.store else "RLM_STORE"
        else:
            source = "--cache" if flags.cache else "RLM_CACHE"
        if isinstance(exc, CacheError) and not isinstance(exc, StoreError):
            print(
                f"rlm-mcp: {source} {exc.path!r} {exc.reason}; it was left as it is: give another file", file=sys.stderr
            )
        else:
            print(f"rlm-mcp: {source}: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("rlm_adapters.mcp_server").info(
        "roots %s, sandbox %s, trajectories in %s",
        [str(r) for r in config.roots],
        config.sandbox,
        config.log_dir,
    )
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(_serve, server, config, runs, stopping)
    return 0


async def _serve(server: MCPServer, config: ServerConfig, runs: RunBook, stopping: threading.Event) -> None:
    """Serve until the client leaves (stdio) or the server is stopped; then stop the background runs."""
    try:
        if config.http:
            await serve_http(server, config, stopping)
        else:
            await serve_stdio(server)
    finally:
        await close_shielded(runs.aclose())


if __name__ == "__main__":
    raise SystemExit(main())
