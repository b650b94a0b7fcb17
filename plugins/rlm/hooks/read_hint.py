"""The rlm plugin's PreToolUse hook: before Claude Code reads a large file, suggest ``rlm_query`` instead.

Opt-in: it says nothing until a size is set, by ``RLM_READ_HINT_BYTES`` (wins) or by the plugin's
``read_hint_bytes`` setting (``CLAUDE_PLUGIN_OPTION_READ_HINT_BYTES``); ``0`` or empty is off. Sizes are
bytes, or a number with ``K``, ``M`` or ``G`` (KiB, MiB, GiB).

It never blocks and never approves: whatever happens it exits 0 and at most adds context for Claude
(``hookSpecificOutput.additionalContext``), leaving the permission decision to Claude Code. The file is only
``stat``-ed, never opened, so a FIFO, a device or a 100 GB file costs the same microseconds. Nothing of the
file name is echoed back (a name can hold newlines or instructions). Standard library only.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

THRESHOLD_VARIABLES = ("RLM_READ_HINT_BYTES", "CLAUDE_PLUGIN_OPTION_READ_HINT_BYTES")
# A PreToolUse input is a few hundred bytes; anything past this is not one, and is not read further.
MAX_INPUT = 1 << 20
UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "G": 1 << 30, "GB": 1 << 30}
TOOL = "rlm_query (mcp__plugin_rlm_rlm__rlm_query)"


def parse_size(raw: str) -> int | None:
    """Bytes from ``"1048576"``, ``"512K"``, ``"10M"`` or ``"1.5G"``; None when it is not a size."""
    text = raw.strip().upper().replace(" ", "")
    number = text.rstrip("KMGB")
    unit = text[len(number) :]
    if unit not in UNITS or not number or len(number) > 20:
        return None
    try:
        value = float(number)
    except ValueError:
        return None
    if not value >= 0 or value == float("inf"):  # also refuses NaN
        return None
    return int(value * UNITS[unit])


def threshold(environ: dict[str, str]) -> tuple[int, str | None]:
    """The size over which to suggest ``rlm_query`` (0: off), and a warning when the setting is not a size."""
    for name in THRESHOLD_VARIABLES:
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        size = parse_size(raw)
        if size is None:
            shown = raw if len(raw) <= 40 else raw[:40] + "..."
            return 0, f"rlm plugin: {name}={shown!r} is not a size; set bytes such as 10000000 or 10M (0 turns it off)"
        return size, None
    return 0, None


def human(size: int) -> str:
    """``48.2 MiB``-style size for the hint (the units `parse_size` reads)."""
    if size < 1 << 10:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


def file_size(tool_input: dict[str, Any], cwd: Any, project: str | None) -> int | None:
    """The size of the regular file `tool_input` names, or None: no path, missing, not a regular file, or
    outside `project` (the server reads only under the project, so ``rlm_query`` could not take it)."""
    path = tool_input.get("file_path")
    if not isinstance(path, str) or not path or len(path) > 4096:
        return None
    if not os.path.isabs(path) and isinstance(cwd, str):
        path = os.path.join(cwd, path)
    try:
        info = os.stat(path)  # follows links: a link to a big file is a big read
        if project and os.path.commonpath([os.path.realpath(path), os.path.realpath(project)]) != os.path.realpath(
            project
        ):
            return None
    except (OSError, ValueError, UnicodeError):  # missing, no access, NUL byte, unencodable name, other drive
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def advice(event: Any, environ: dict[str, str]) -> dict[str, Any] | None:
    """The hook's JSON answer for one PreToolUse `event`, or None to stay silent."""
    limit, warning = threshold(environ)
    if warning is not None:
        return {"systemMessage": warning}
    if limit <= 0 or not isinstance(event, dict) or event.get("tool_name") != "Read":
        return None
    tool_input = event.get("tool_input")
    if not isinstance(tool_input, dict) or tool_input.get("limit") is not None:
        return None  # a Read of a chosen slice is already the economical way
    size = file_size(tool_input, event.get("cwd"), environ.get("CLAUDE_PROJECT_DIR"))
    if size is None or size <= limit:
        return None
    context = (
        f"The file about to be read is {human(size)}, over the {human(limit)} the user set for large reads. "
        f"Reading it whole fills the context. If the task is a question about its content, {TOOL} answers it "
        "without reading it here: pass the question as `query` and this file's path in `paths` (it returns the "
        "answer with path:line sources to check with a narrow Read). For one specific part, Read with "
        "`offset` and `limit` instead."
    )
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": context}}


def main() -> int:
    """Read one PreToolUse event from stdin, print advice as JSON when there is some, exit 0 always."""
    try:
        raw = sys.stdin.buffer.read(MAX_INPUT + 1)
        event = json.loads(raw) if len(raw) <= MAX_INPUT else None
    except (OSError, ValueError, RecursionError):  # not JSON (or nested past Python's limit): not our event
        event = None
    try:
        answer = advice(event, dict(os.environ))
    except Exception:  # a hint is never worth a broken tool call
        answer = None
    if answer is not None:
        sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
