"""Exported oolong-synth rows (``--data-dir``): score the published questions over the published windows.

The published split is the Hugging Face dataset ``oolongbench/oolong-synth``; export it once, for example
``load_dataset("oolongbench/oolong-synth", split="validation").to_json("oolong/validation.jsonl")``, and pass
the folder (or the file). Each row needs ``context_window_text``, ``question``, ``answer``, ``answer_type``,
``context_len`` and ``dataset``; ``id``, ``context_window_id``, ``task_group`` and ``task`` are used when present.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlm_adapters.errors import ConfigurationError

REQUIRED = ("context_window_text", "question", "answer", "answer_type", "context_len", "dataset")


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigurationError(f"--data-dir {str(path)!r} is neither a folder nor a file of oolong-synth rows")
    files = sorted([*path.glob("*.jsonl"), *path.glob("*.json")])
    if not files:
        raise ConfigurationError(
            f"no .jsonl or .json oolong-synth rows in {str(path)!r}; export them with datasets' to_json()"
        )
    return files


def _rows_of(path: Path) -> Iterator[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        yield from json.loads(text)
        return
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigurationError(f"{str(path)!r} line {number} is not JSON: {exc.msg}") from None


def load_rows(path: Path, dataset: str = "trec_coarse") -> list[dict[str, Any]]:
    """Every row of `dataset` under `path`, ordered by window and id as the original evaluates them.

    Raises:
        ConfigurationError: when a file is unreadable or a row lacks a required field.
    """
    rows = []
    for file in _files(path):
        for row in _rows_of(file):
            missing = [key for key in REQUIRED if key not in row]
            if missing:
                raise ConfigurationError(f"an oolong-synth row in {str(file)!r} lacks {', '.join(missing)}")
            if row["dataset"] == dataset:
                rows.append(row)
    return sorted(rows, key=lambda row: (int(row.get("context_window_id", 0)), int(row.get("id", 0))))
