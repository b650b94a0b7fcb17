"""Claude Code's session transcripts (``~/.claude/projects/<project>/<session>.jsonl``) as RLM documents.

The format is Claude Code's, not ours, and a transcript holds whatever passed through the session (file
contents, tool output, secrets), so it is read as data and tolerantly: the files are read by
`rlm_adapters.files.load_paths` (the walk rules of ``--root``: no symbolic link followed out of the folder,
size and count caps), each line is parsed with `json.loads` and nothing else (no code from it runs), a line
that is not JSON or nests too deep is kept as text with a note, an unknown record type is kept as its JSON
text, and control characters are removed. One document per message or tool result, with its session, line,
time, role, tool name and the file paths its tool call named.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlm_adapters.errors import FileLoadError
from rlm_adapters.files import LoadedFile, LoadResult, load_paths

# One line past this is kept cut, with a note (a tool result can hold a whole file; the load's cap bounds the sum).
MAX_LINE_CHARS = 200_000
# A turn's text past this is cut, and the cut is said where it happens (the run's model reads the marker, the
# agent the tool's description, the operator docs/mcp.md): an answer must not take a cut turn for a whole one.
MAX_TEXT_CHARS = 50_000
# JSON nested deeper than this is not walked (`json.loads` itself stops at Python's recursion limit).
MAX_DEPTH = 64
PATH_KEYS = ("file_path", "path", "notebook_path")
# Claude Code cuts a project's folder name here (in UTF-16 units) and adds a hash of the whole path.
MAX_FOLDER_NAME = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
# What `str.splitlines` breaks at besides "\r" (dropped): the text keeps them, a context line must not.
_LINE_BREAK = re.compile("[\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


@dataclass(frozen=True)
class Entry:
    """One message or tool result of a transcript.

    Attributes:
        session: The session's id (its file's name without ``.jsonl``).
        line: The line of the file it was read from (1-based).
        time: Its ISO timestamp, or "" when the record has none.
        role: ``user``, ``assistant``, ``tool_result``, or the record's type for other records.
        text: What it said (tool calls as ``name(arguments)``), without control characters.
        tool: The tool called or answered, if any.
        paths: File paths named by its tool call.
        note: Why it was kept as text (a malformed or cut line), else "".
    """

    session: str
    line: int
    time: str
    role: str
    text: str
    tool: str = ""
    paths: tuple[str, ...] = ()
    note: str = ""

    def document(self) -> dict[str, Any]:
        """The entry as an RLM document, its id ``session:line``."""
        metadata: dict[str, Any] = {"session": self.session, "line": self.line, "time": self.time, "role": self.role}
        if self.tool:
            metadata["tool"] = self.tool
        if self.paths:
            metadata["paths"] = list(self.paths)
        if self.note:
            metadata["note"] = self.note
        return {"id": f"{self.session}:{self.line}", "text": self.text, "metadata": metadata}


def clean(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` without control characters (newlines and tabs stay), cut at `limit` with a marker that says so."""
    text = _CONTROL.sub("", text)
    if len(text) > limit:
        dropped = len(text) - limit
        return text[:limit] + (
            f" [... cut: rlm_recall keeps the first {limit:,} characters of each entry; {dropped:,} more are in "
            "the transcript file only]"
        )
    return text


def _depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep `value` nests, counted without recursion and at most to `limit + 1`."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > limit:
            return level
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [_as_text(item.get("text", item) if isinstance(item, dict) else item) for item in value]
        return "\n".join(p for p in parts if p)
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _paths(arguments: Any) -> tuple[str, ...]:
    if not isinstance(arguments, dict):
        return ()
    return tuple(clean(v, 4096) for k in PATH_KEYS if isinstance(v := arguments.get(k), str) and v)


@dataclass
class _Reader:
    session: str
    tools: dict[str, str] = field(default_factory=dict)  # tool_use id -> tool name, for the results

    def entries(self, text: str) -> Iterator[Entry]:
        # "\n" only, as Claude Code writes a record per line: `str.splitlines` would also break at U+2028,
        # U+2029 and U+0085, which its JSON writer leaves raw inside strings, splitting a record and moving
        # every later line (and each citation of it) down.
        for number, raw in enumerate(text.split("\n"), 1):
            if raw.strip():
                yield from self._line(number, raw)

    def _line(self, number: int, raw: str) -> Iterator[Entry]:
        if len(raw) > MAX_LINE_CHARS:
            yield Entry(self.session, number, "", "unparsed", clean(raw), note="line too long to parse; cut")
            return
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError):
            yield Entry(self.session, number, "", "unparsed", clean(raw), note="not JSON; kept as text")
            return
        if _depth(record) > MAX_DEPTH:
            yield Entry(self.session, number, "", "unparsed", clean(raw), note="nested too deep; kept as text")
            return
        if not isinstance(record, dict):
            yield Entry(self.session, number, "", "unparsed", clean(raw), note="not a JSON object; kept as text")
            return
        yield from self._record(number, record)

    def _record(self, number: int, record: dict[str, Any]) -> Iterator[Entry]:
        time = clean(record["timestamp"], 64) if isinstance(record.get("timestamp"), str) else ""
        kind = record.get("type")
        message = record.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            # summary, system, attachment, a type newer than this reader: kept as its JSON, as text.
            role = clean(kind, 64) if isinstance(kind, str) and kind else "record"
            text = record.get("summary") if isinstance(record.get("summary"), str) else None
            yield Entry(self.session, number, time, role, clean(text or json.dumps(record, ensure_ascii=False)))
            return
        role = clean(str(message.get("role") or kind), 64)
        content = message.get("content")
        if not isinstance(content, list):
            yield Entry(self.session, number, time, role, clean(_as_text(content)))
            return
        said: list[str] = []
        tools: list[str] = []
        paths: list[str] = []
        for block in content:
            if not isinstance(block, dict):
                said.append(_as_text(block))
                continue
            btype = block.get("type")
            if btype == "tool_result":
                tool = self.tools.get(str(block.get("tool_use_id")), "")
                text = _as_text(block.get("content"))
                if block.get("is_error"):
                    text = "[error] " + text
                yield Entry(self.session, number, time, "tool_result", clean(text), tool=tool)
            elif btype == "tool_use":
                name = clean(str(block.get("name", "")), 256)
                self.tools[str(block.get("id"))] = name
                tools.append(name)
                paths.extend(_paths(block.get("input")))
                said.append(f"{name}({json.dumps(block.get('input'), ensure_ascii=False)})")
            elif btype in ("text", "thinking"):
                said.append(_as_text(block.get(btype)))
            else:
                said.append(json.dumps(block, ensure_ascii=False))
        if said:
            text = clean("\n".join(s for s in said if s))
            yield Entry(self.session, number, time, role, text, tool=", ".join(tools), paths=tuple(paths))


def parse_transcript(session: str, text: str) -> list[Entry]:
    """The entries of one transcript's `text` (never raises on what the text holds)."""
    return list(_Reader(session).entries(text))


def _utf16_units(text: str) -> list[int]:
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def project_folder_name(project: str) -> str:
    """The folder Claude Code keeps the project at path `project` under (its ``sanitizePath``).

    Each UTF-16 unit that is not an ASCII letter or digit becomes ``-`` (so ``/work/my.app`` is
    ``-work-my-app``, and a character outside the BMP two dashes); a name over `MAX_FOLDER_NAME` units is cut
    there and followed by ``-`` and the path's hash: the djb2 of Claude Code run by Node, which this returns;
    run by Bun it is Bun's own hash, which `project_folder` does not guess.
    """
    units = _utf16_units(project)
    name = "".join(chr(u) if u < 128 and chr(u).isalnum() else "-" for u in units)
    if len(name) <= MAX_FOLDER_NAME:
        return name
    digest = 0
    for unit in units:
        digest = ((digest << 5) - digest + unit) & 0xFFFFFFFF
    value = abs(digest - (1 << 32) if digest >= 1 << 31 else digest)
    digits = ""
    while True:
        value, digit = divmod(value, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + digits
        if not value:
            break
    return f"{name[:MAX_FOLDER_NAME]}-{digits}"


def project_folder(projects: Path, project: Path) -> Path:
    """Where, under Claude Code's `projects` folder, the transcripts of the project at `project` are.

    The path is taken as given and resolved (both name the same project; Claude Code may have seen either).
    The folder may not exist yet: no session of this project has been written.

    Raises:
        ValueError: the path is so long that Claude Code named its folder with a hash this server cannot
            compute, and other folders share the cut name: which one is this project's cannot be told.
    """
    names = list(dict.fromkeys(project_folder_name(str(p)) for p in (project, project.resolve())))
    for name in names:
        if (projects / name).is_dir():
            return projects / name
    for name in names:
        if len(name) > MAX_FOLDER_NAME:
            cut = name[: MAX_FOLDER_NAME + 1]
            with contextlib.suppress(OSError):
                if any(p.name.startswith(cut) for p in projects.iterdir()):
                    raise ValueError(
                        f"the path of this project ({project}) is over {MAX_FOLDER_NAME} characters: Claude Code "
                        "named its transcripts' folder with a hash this server cannot compute, and several "
                        "projects' folders start alike; start rlm-mcp with --recall-projects all to read them all"
                    )
    return projects / names[0]


def check_session(session: str) -> str:
    """`session` once it is a session id (letters, digits, ``-``, ``_``), so it names a file in the folder.

    Raises:
        ValueError: it is not.
    """
    if not _SESSION_ID.fullmatch(session):
        raise ValueError(f"session {session!r} is not a session id; pass 'current', 'all' or a transcript's id")
    return session


def read_transcripts(
    folder: Path, sessions: Sequence[str] | None, *, max_bytes: int, max_files: int = 1000
) -> tuple[list[Entry], LoadResult]:
    """The entries of the transcripts under `folder`: the named `sessions` (anywhere below it), else all.

    Files are read by `load_paths` with `folder` as the only root, so its walk rules and caps hold.

    Raises:
        FileLoadError: over the caps (none found is an empty result, when no session is named).
        ValueError: a session is not a session id, or a named one has no transcript.
    """
    patterns = ["**/*.jsonl"] if sessions is None else [f"**/{check_session(s)}.jsonl" for s in sessions]
    try:
        loaded = load_paths(patterns, [folder], base=folder, max_bytes=max_bytes, max_files=max_files)
    except FileLoadError as exc:
        # Our own glob under our own folder found nothing: no transcript yet (the caller says so), not an error
        # of the agent's paths. Any other refusal (a cap, the time) stands.
        if not str(exc).endswith("matched no files"):
            raise
        loaded = LoadResult(files=[], skipped=[])
    if sessions is not None and not loaded.files:
        raise ValueError(f"no transcript of session {', '.join(sessions)!r} under {folder}")
    entries: list[Entry] = []
    for file in loaded.files:
        entries.extend(parse_transcript(Path(file.path).stem, file.text))
    return entries, loaded


def as_context(entries: Sequence[Entry], loaded: LoadResult) -> LoadResult:
    """The entries as one document per session, named by its id, whose line N is the transcript's line N.

    Each line reads ``[time role tool paths] text`` with the text's own newlines shown as ``⏎``, so a
    source the run cites, ``session:N``, is line N of the session's file and carries the turn's time. The
    documents' metadata keeps each entry (`Entry.document`'s) without its text.
    """
    by_session: dict[str, dict[int, list[Entry]]] = {}
    for e in entries:
        by_session.setdefault(e.session, {}).setdefault(e.line, []).append(e)
    files = []
    for session, lines in by_session.items():
        last = max(lines)
        rendered = [" | ".join(_one_line(e) for e in lines[n]) if n in lines else "" for n in range(1, last + 1)]
        text = "\n".join(rendered)
        metadata = {"format": "claude-code-transcript", "entries": sum(len(v) for v in lines.values())}
        files.append(LoadedFile(path=session, text=text, size=len(text.encode()), metadata=metadata))
    return LoadResult(files=files, skipped=list(loaded.skipped))


def _one_line(e: Entry) -> str:
    # The head too: a file name, a tool name or a forged time with a newline must not shift the lines after it.
    # Every character some reader takes for a line break is shown as one (U+2028 too): model code that splits
    # the context with `splitlines` must count the transcript's lines.
    head = " ".join(x for x in (e.time, e.role, e.tool, " ".join(e.paths), e.note) if x)
    return _LINE_BREAK.sub(" ⏎ ", f"[{head}] {e.text}".replace("\r", ""))


def since_filter(entries: Sequence[Entry], since: str | None) -> list[Entry]:
    """The entries at or after `since` (an ISO time or date, compared as text: ``2026-12-01T14:00``)."""
    if since is None:
        return list(entries)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}([T ][0-9:.]+Z?)?", since):
        raise ValueError(f"since {since!r} is not an ISO time; pass e.g. '2026-12-01' or '2026-12-01T14:00'")
    start = since.replace(" ", "T")
    return [e for e in entries if e.time and e.time >= start]


def render(entries: Sequence[Entry]) -> str:
    """The entries as one text, each headed ``[session:line time role tool paths]`` (what sources cite)."""
    blocks = []
    for e in entries:
        head = " ".join(x for x in (f"{e.session}:{e.line}", e.time, e.role, e.tool, " ".join(e.paths), e.note) if x)
        blocks.append(f"[{head}]\n{e.text}")
    return "\n\n".join(blocks)


__all__ = [
    "MAX_TEXT_CHARS",
    "Entry",
    "as_context",
    "check_session",
    "clean",
    "parse_transcript",
    "project_folder",
    "project_folder_name",
    "read_transcripts",
    "render",
    "since_filter",
]
