"""Exported oolong-synth rows (``--data-dir``): score the published questions over the published windows.

The published split is the Hugging Face dataset ``oolongbench/oolong-synth``; export it once, for example
``load_dataset("oolongbench/oolong-synth", split="validation").to_json("oolong/validation.jsonl")``, and pass
the folder (or the file). Each row needs ``context_window_text``, ``question``, ``answer``, ``answer_type``,
``context_len`` and ``dataset``; ``id``, ``context_window_id``, ``task_group`` and ``task`` are used when present.

Every row is checked when the file is loaded, before any model is called: a row whose gold answer the scorer
could not read (``answer`` must be the original's list literal, ``"['entity']"``, ``"[28]"`` or
``"[datetime.date(2024, 5, 17)]"``) or whose fields have the wrong type is refused in one line naming the
file and the row. The files of a folder are read as `data_files` reads them: never through a link.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlm_adapters.errors import ConfigurationError
from rlm_adapters.evals.scorers import NUMERIC, oolong_gold
from rlm_adapters.evals.tasks.data_files import read_text

REQUIRED = ("context_window_text", "question", "answer", "answer_type", "context_len", "dataset")
TEXT_FIELDS = ("context_window_text", "question", "answer", "answer_type", "dataset")
INT_FIELDS = ("context_len", "id", "context_window_id")
# The longest gold answer the scorer parses: the original's are a few words; parsing is not unbounded work.
MAX_ANSWER = 1000


def _files(path: Path) -> list[tuple[Path, str]]:
    """Each rows file under `path` with its text."""
    if path.is_file():
        named = path.resolve()  # the user named this file: a link they gave is theirs to follow
        return [(path, read_text(named.parent, named.name, "oolong-synth rows file"))]
    if not path.is_dir():
        raise ConfigurationError(f"--data-dir {str(path)!r} is neither a folder nor a file of oolong-synth rows")
    files = sorted([*path.glob("*.jsonl"), *path.glob("*.json")])
    if not files:
        raise ConfigurationError(
            f"no .jsonl or .json oolong-synth rows in {str(path)!r}; export them with datasets' to_json()"
        )
    return [(file, read_text(path, file.name, "oolong-synth rows file")) for file in files]


def _rows_of(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """(where, row) for each row of a file: ``line N`` of JSON lines, ``row N`` of a JSON array."""
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{str(path)!r} is not JSON: {exc.msg} (line {exc.lineno})") from None
        for number, row in enumerate(rows, 1):
            yield f"row {number}", row
        return
    for number, line in enumerate(text.split("\n"), 1):  # JSON Lines end at "\n" only (U+2028 is text)
        if line.strip():
            try:
                yield f"line {number}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"{str(path)!r} line {number} is not JSON: {exc.msg}") from None


def _clip(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_item_list(value: Any) -> bool:
    if not isinstance(value, list) or not value:
        return False
    first = value[0]
    return isinstance(first, str) or (isinstance(first, int) and not isinstance(first, bool))


def check_row(row: Any, where: str) -> dict[str, Any]:
    """`row` when it is an oolong-synth row the task can use.

    Args:
        row: One decoded row.
        where: The file and row, for the message (``'rows.jsonl' line 3``).

    Raises:
        ConfigurationError: naming `where` and the field that is missing, mistyped or unreadable.
    """
    if not isinstance(row, dict):
        raise ConfigurationError(f"{where} is not an oolong-synth row (a JSON object), got {_clip(row)}")
    missing = [key for key in REQUIRED if key not in row]
    if missing:
        raise ConfigurationError(f"{where} lacks {', '.join(missing)}")
    for key in TEXT_FIELDS:
        if not isinstance(row[key], str):
            raise ConfigurationError(f"{where}: {key} must be a string, got {_clip(row[key])}")
    for key in INT_FIELDS:
        if key in row and (isinstance(row[key], bool) or not isinstance(row[key], int)):
            raise ConfigurationError(f"{where}: {key} must be an integer, got {_clip(row[key])}")
    answer = row["answer"]
    try:
        if len(answer) > MAX_ANSWER:
            raise ValueError("too long")
        # The scorer takes the first item of the literal, as the original does; a string or a dict would give
        # it a letter or a key, so the list is checked here.
        if "datetime" not in answer and not _one_item_list(ast.literal_eval(answer)):
            raise ValueError("not a list of a label or a number")
        gold = oolong_gold(answer)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ConfigurationError(
            f"{where}: answer {_clip(answer)} is not an oolong-synth gold answer; it must be a one-item list "
            """literal such as "['entity']", "[28]" or "[datetime.date(2024, 5, 17)]\""""
        ) from None
    if row["answer_type"] == NUMERIC and (isinstance(gold, bool) or not isinstance(gold, int)):
        raise ConfigurationError(f"{where}: a {NUMERIC} answer must hold an integer, got {_clip(answer)}")
    return row


def load_rows(path: Path, dataset: str = "trec_coarse") -> list[dict[str, Any]]:
    """Every row of `dataset` under `path`, ordered by window and id as the original evaluates them.

    Raises:
        ConfigurationError: when a file is unreadable or a row is not one the task can score.
    """
    rows = []
    for file, text in _files(path):
        for where, row in _rows_of(file, text):
            checked = check_row(row, f"{str(file)!r} {where}")
            if checked["dataset"] == dataset:
                rows.append(checked)
    return sorted(rows, key=lambda row: (row.get("context_window_id", 0), row.get("id", 0)))
