#!/bin/sh
# Starts the rlm plugin's MCP server (rlm-mcp over stdio) from any shell, inside a virtualenv or not, with
# rlm_recall on over Claude Code's transcripts (${CLAUDE_CONFIG_DIR:-$HOME/.claude}/projects).
#
# The first of these that exists is used:
#   1. $RLM_MCP_COMMAND, or the plugin's "rlm-mcp command" setting: the absolute path of an installed
#      rlm-mcp (`rlm-mcp --print-config claude` prints this installation's);
#   2. rlm-mcp on PATH (a pip/pipx install, or the virtualenv Claude Code was started from).
# Nothing is fetched by name from a package index (issue 48): whoever registered that name there would run for
# every user of the plugin without rlm-mcp installed. The user installs rlm-adapters from a source they trust.
# Nothing found (or a setting refused): one line on stderr, and a stand-in server (scripts/unavailable.py,
# standard library only) that Claude Code connects to, whose every tool call answers with that line, so the
# user and the agent see why in the client instead of a bare "Failed to connect".
#
# Only absolute PATH entries are searched: an empty or relative entry means the current folder, where the
# project (a cloned repository) could hold a file named rlm-mcp, uvx or python3.
set -eu
set -f  # PATH entries are split on ':' below; none of them is a pattern

version=0.1.0  # rlm-adapters at the plugin's version (tests/plugin checks it against pyproject.toml)
case $0 in
    */*) plugin_root=$(CDPATH='' cd -- "${0%/*}/.." && pwd -P) ;;
    *) plugin_root=$(pwd -P)/.. ;;
esac

safe_path=
old_ifs=$IFS
IFS=:
for folder in $PATH; do
    case $folder in
        /*) safe_path=${safe_path:+$safe_path:}$folder ;;
    esac
done
IFS=$old_ifs
PATH=$safe_path
export PATH

unavailable() {
    echo "rlm plugin: $1" >&2
    if python=$(command -v python3 2>/dev/null); then
        exec "$python" -I -S "$plugin_root/scripts/unavailable.py" "rlm-mcp cannot start: $1"
    fi
    exit 127
}

# rlm_recall (issue 40) over the transcripts Claude Code writes, in the folder it writes them: passed first, so
# that a --transcripts in the plugin's args wins. Its projects folder may not exist before Claude Code's first
# session: the server then starts all the same and rlm_recall says there are no transcripts yet. Without the
# config folder itself (where Claude Code keeps this plugin) rlm_recall stays off rather than stop rlm_query.
# One argument "--transcripts=DIR", so that a folder named "-x" is never read as a flag.
claude_dir=${CLAUDE_CONFIG_DIR:-${HOME:+$HOME/.claude}}
if [ -n "$claude_dir" ] && [ -d "$claude_dir" ]; then
    set -- "--transcripts=$claude_dir/projects" "$@"
fi

# The plugin setting arrives through .mcp.json as RLM_PLUGIN_SERVER_COMMAND; empty means not set.
command=${RLM_MCP_COMMAND:-${RLM_PLUGIN_SERVER_COMMAND:-}}
unset RLM_PLUGIN_SERVER_COMMAND
if [ -n "$command" ]; then
    case $command in
        /*) ;;
        *) unavailable "the rlm-mcp command '$command' is not an absolute path; set the absolute path of rlm-mcp (rlm-mcp --print-config claude prints it)" ;;
    esac
    if [ ! -f "$command" ] || [ ! -x "$command" ]; then
        unavailable "the rlm-mcp command '$command' is not an executable file; set the absolute path of rlm-mcp (rlm-mcp --print-config claude prints it)"
    fi
    exec "$command" "$@"
fi
if found=$(command -v rlm-mcp 2>/dev/null); then
    exec "$found" "$@"
fi
unavailable "no rlm-mcp on PATH; install rlm-adapters $version from a source you trust (pip install 'rlm-adapters[mcp]', or pipx install 'rlm-adapters[mcp]'), or set RLM_MCP_COMMAND (or the plugin's rlm-mcp command setting) to the absolute path of rlm-mcp"
