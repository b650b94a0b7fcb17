"""A trajectory log read as untrusted input: every line parsed and every field checked here, and nowhere else.

A log may have been altered, or come from another program or a hostile source, and everything the viewer
builds from it reaches a terminal, an HTML page or a training file. `read_log` parses the lines (a torn
last line of a live log is skipped; anything else that is not a JSON object is refused), and `Fields` is the
only way the model reads a record: each accessor returns a value of the type it names, a missing or null
field gives the default, and a field of the wrong type (a query that is a number, a context description
that is a list, an iteration that is ``Infinity``, a count that is negative) raises `BadLogError`, whose
message is one line naming the file, the line and the field. Texts come back with lone surrogates written as
their escape (``\\udc80``: they have no UTF-8 form, so a page or a file could not hold them), and free-form
parts (a context description, the configuration) with non-finite numbers as null, so the page's JSON is
always valid.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_NESTING = 64  # free-form JSON nested deeper than this is refused (it is checked recursively)
MAX_COUNT = 2**53  # the largest whole number a page's JavaScript holds exactly
USAGE_PARTS = ("total", "root", "sub")
USAGE_KEYS = ("calls", "input_tokens", "output_tokens")
_SURROGATE = re.compile("[\ud800-\udfff]")


class BadLogError(ValueError):
    """A trajectory log holds something the viewer will not show; the message is one line naming where."""


def clean_text(text: str) -> str:
    """`text` with each lone surrogate written as its escape, so that it can be encoded as UTF-8."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: Any) -> str:
    """A short, terminal-safe description of a bad value for an error message."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        text = str(value)
        return text if len(text) <= 40 else f"a number of {len(text)} digits"
    if isinstance(value, str):
        return json.dumps(value[:60] + ("..." if len(value) > 60 else ""))  # ASCII: escapes are visible
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    return type(value).__name__


@dataclass(frozen=True)
class Fields:
    """One record of a log, read field by field.

    Attributes:
        record: The parsed record (or an object inside one).
        where: How errors name the record (``'run.jsonl' line 4``).
        prefix: Put before field names in errors, for an object inside a record (``usage.total.``).
    """

    record: Mapping[str, Any]
    where: str
    prefix: str = ""

    def bad(self, key: str, value: Any, expected: str) -> BadLogError:
        """The error for field `key` holding `value` where `expected` was due."""
        return BadLogError(
            f"{self.where}: {self.prefix + key!r} is {shown(value)}, expected {expected}; "
            "the log was altered or was not written by RLMLogger"
        )

    def text(self, key: str, default: str = "") -> str:
        """A text field."""
        found = self.maybe_text(key)
        return default if found is None else found

    def maybe_text(self, key: str) -> str | None:
        """A text field that may be null."""
        value = self.record.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.bad(key, value, "text")
        return clean_text(value)

    def count(self, key: str, default: int = 0) -> int:
        """A whole number from 0 to 2**53 (an integral float such as ``3.0`` is taken as 3)."""
        value = self.record.get(key)
        if value is None:
            return default
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            number = int(value)
        if number is None or not 0 <= number <= MAX_COUNT:
            raise self.bad(key, value, "a whole number from 0 to 2**53")
        return number

    def number(self, key: str, default: float = 0.0) -> float:
        """A finite number."""
        value = self.record.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.bad(key, value, "a finite number")
        return float(value)

    def flag(self, key: str) -> bool:
        """A true / false field (missing is false)."""
        value = self.record.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.bad(key, value, "true or false")
        return value

    def texts(self, key: str) -> list[str]:
        """A list of texts."""
        value = self.record.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self.bad(key, value, "a list of texts")
        return [clean_text(item) for item in value]

    def mapping(self, key: str) -> dict[str, Any]:
        """A free-form JSON object, cleaned (`clean_json`)."""
        value = self.record.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.bad(key, value, "an object")
        cleaned: dict[str, Any] = clean_json(value, self, key)
        return cleaned

    def messages(self, key: str) -> list[dict[str, str]]:
        """Chat messages: a list of ``{"role": text, "content": text}`` objects."""
        value = self.record.get(key)
        if value is None:
            return []
        expected = 'a list of {"role": text, "content": text} messages'
        if not isinstance(value, list):
            raise self.bad(key, value, expected)
        out: list[dict[str, str]] = []
        for item in value:
            if not (isinstance(item, dict) and isinstance(item.get("role"), str)):
                raise self.bad(key, value, expected)
            content = item.get("content")
            if not isinstance(content, str):
                raise self.bad(f"{key}[{len(out)}].content", content, "text")
            out.append({"role": clean_text(item["role"]), "content": clean_text(content)})
        return out

    def usage(self, key: str) -> dict[str, Any]:
        """A run's usage: ``total`` / ``root`` / ``sub`` parts and ``by_model`` parts, each of calls, input and
        output tokens and cost; other keys are dropped."""
        value = self.record.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.bad(key, value, "an object")
        out: dict[str, Any] = {}
        for part in USAGE_PARTS:
            if value.get(part) is not None:
                out[part] = self._usage_part(f"{key}.{part}", value[part])
        models = value.get("by_model")
        if models is not None:
            if not isinstance(models, dict):
                raise self.bad(f"{key}.by_model", models, "an object")
            out["by_model"] = {
                clean_text(name): self._usage_part(f"{key}.by_model", part) for name, part in models.items()
            }
        return out

    def _usage_part(self, key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.bad(key, value, "an object of calls, input_tokens, output_tokens and cost")
        part = Fields(value, self.where, f"{self.prefix}{key}.")
        numbers: dict[str, Any] = {name: part.count(name) for name in USAGE_KEYS}
        numbers["cost"] = part.number("cost")
        return numbers


def clean_json(value: Any, fields: Fields, key: str, depth: int = 0) -> Any:
    """A free-form JSON value with texts cleaned and non-finite numbers as None; too deep is refused."""
    if depth > MAX_NESTING:
        raise fields.bad(key, value, f"at most {MAX_NESTING} levels of nesting")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [clean_json(item, fields, key, depth + 1) for item in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v, fields, key, depth + 1) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Record:
    """A parsed line of a log and where it came from."""

    line: int
    data: dict[str, Any]


def name_of(path: str | Path | None) -> str:
    """How errors name a log file."""
    return "the log" if path is None else repr(str(path))


def read_log(path: str | Path) -> list[Record]:
    """The JSON objects of a log, one per non-blank line, in file order.

    A last line with no newline that does not parse is a live log's torn write and is skipped; any other line
    that is not a UTF-8 JSON object raises `BadLogError`.
    """
    name = name_of(path)
    out: list[Record] = []
    try:
        with Path(path).open("rb") as handle:
            for number, raw in enumerate(handle, 1):
                if not raw.strip():
                    continue
                problem, data = _parse(raw)
                if problem is None and not isinstance(data, dict):
                    problem = "is not a JSON object"
                if problem is not None:
                    if not raw.endswith(b"\n") and problem != "is not a JSON object":
                        break  # torn last line
                    raise BadLogError(f"{name} line {number} {problem}: a trajectory log has one object per line")
                out.append(Record(number, data))
    except OSError as exc:
        raise BadLogError(f"cannot read {name}: {exc.strerror or exc}") from None
    return out


def _parse(raw: bytes) -> tuple[str | None, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 text", None
    try:
        return None, json.loads(text)
    except RecursionError:
        return "nests too deeply to read", None
    except ValueError as exc:  # JSONDecodeError, and integers too long to convert
        return f"is not valid JSON ({str(exc).split(':')[0]})", None
