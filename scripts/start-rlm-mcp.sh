#!/bin/sh
# Starts the rlm plugin's MCP server (rlm-mcp over stdio) from any shell, inside a virtualenv or not.
#
# The first of these that exists is used:
#   1. $RLM_MCP_COMMAND, or the plugin's "rlm-mcp command" setting: the absolute path of an installed
#      rlm-mcp (`rlm-mcp --print-config claude` prints this installation's);
#   2. rlm-mcp on PATH (a pip/pipx install, or the virtualenv Claude Code was started from);
#   3. uvx, then pipx run, with this plugin's own copy of rlm-adapters, so the server always matches the
#      plugin; the first start downloads the dependencies into uv's or pipx's cache, later starts are offline.
# Nothing found: one line on stderr saying what to install, and Claude Code shows the server as failed.
set -eu

# The plugin setting arrives through .mcp.json as RLM_PLUGIN_SERVER_COMMAND; empty means not set.
command=${RLM_MCP_COMMAND:-${RLM_PLUGIN_SERVER_COMMAND:-}}
unset RLM_PLUGIN_SERVER_COMMAND
if [ -n "$command" ]; then
    if [ ! -x "$command" ]; then
        echo "rlm plugin: rlm-mcp command '$command' is not an executable file; set an absolute path to rlm-mcp" >&2
        exit 127
    fi
    exec "$command" "$@"
fi
if command -v rlm-mcp >/dev/null 2>&1; then
    exec rlm-mcp "$@"
fi
plugin_root=$(CDPATH='' cd -- "$(dirname -- "$0")/.." && pwd)
if command -v uvx >/dev/null 2>&1; then
    exec uvx --from "$plugin_root[mcp]" rlm-mcp "$@"
fi
if command -v pipx >/dev/null 2>&1; then
    exec pipx run --spec "$plugin_root[mcp]" rlm-mcp "$@"
fi
echo "rlm plugin: cannot start rlm-mcp: install uv (uvx), pipx, or pip install 'rlm-adapters[mcp]', or set RLM_MCP_COMMAND to the absolute path of rlm-mcp" >&2
exit 127
