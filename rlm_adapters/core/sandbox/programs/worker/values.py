"""How values cross the sandbox boundary: tagged JSON, decoded within bounds on the host.

Tool arguments, tool return values and plain values given as tools travel as tagged JSON: the types
below come back as themselves on the other side, anything else fails with an error naming the value.
Nothing is ever unpickled: the host must not run what a sandbox sends it (`core/sandbox/toolargs.py`
decodes with `DecodeBounds`).
"""

from __future__ import annotations

from collections.abc import Callable

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

TAG = "__rlm_type__"
ENCODABLE = "JSON data, set, frozenset, tuple, bytes, datetime, date, time, timedelta, Decimal, complex"


class ValueEncodingError(TypeError):
    """A value cannot cross the sandbox boundary faithfully."""


def encode_value(value: Any, where: str = "value") -> Any:
    """`value` as JSON-ready data; raises `ValueEncodingError` naming it when that is not possible."""
    import datetime
    import decimal

    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list):
        return [encode_value(v, where) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and TAG not in value:
            return {k: encode_value(v, where) for k, v in value.items()}
        return {TAG: "dict", "items": [[encode_value(k, where), encode_value(v, where)] for k, v in value.items()]}
    if isinstance(value, tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return {TAG: type(value).__name__, "items": [encode_value(v, where) for v in items]}
    if isinstance(value, bytes | bytearray):
        import base64

        return {TAG: "bytes", "b64": base64.b64encode(bytes(value)).decode("ascii")}
    for kind in (datetime.datetime, datetime.date, datetime.time):
        if type(value) is kind:
            return {TAG: kind.__name__, "iso": value.isoformat()}
    if isinstance(value, datetime.timedelta):
        return {TAG: "timedelta", "seconds": value.total_seconds()}
    if isinstance(value, decimal.Decimal):
        return {TAG: "Decimal", "text": str(value)}
    if isinstance(value, complex):
        return {TAG: "complex", "parts": [value.real, value.imag]}
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise ValueEncodingError(
        f"{where}: the {type(value).__name__} value {shown} cannot cross the sandbox boundary; convert it "
        f"to one of: {ENCODABLE} (e.g. dataclasses.asdict for a dataclass)"
    )


class DecodeBounds:
    """Limits on a value decoded from tagged JSON that a sandbox sent (the host's side: model code wrote it).

    Without them a value of 60,000 integer keys that all hash alike costs the decoder minutes (each
    insertion compares the key with every earlier one): a mapping or set may hold at most
    `max_equal_hashes` keys of one hash value, `max_keys` keys in all; the whole value at most
    `max_items` items, `max_depth` levels, strings and byte strings of `max_chars`.
    """

    def __init__(
        self,
        *,
        max_depth: int = 100,
        max_items: int = 1_000_000,
        max_keys: int = 100_000,
        max_equal_hashes: int = 8,
        max_chars: int = 64 * 1024 * 1024,
    ) -> None:
        self.max_depth = max_depth
        self.max_items = max_items
        self.max_keys = max_keys
        self.max_equal_hashes = max_equal_hashes
        self.max_chars = max_chars


class BoundExceeded(ValueEncodingError):
    """A decoded value passed one of its `DecodeBounds` (`bound` names it)."""

    def __init__(self, bound: str, message: str) -> None:
        super().__init__(message)
        self.bound = bound


# The text of a Decimal or an ISO date: a few characters in an honest value, never megabytes.
MAX_DECIMAL_CHARS = 10_000
MAX_ISO_CHARS = 64


class _Decoding:
    """One `decode_value` call: the builders of each tag, counting what `bounds` limits (if any)."""

    def __init__(self, bounds: DecodeBounds | None) -> None:
        self.bounds = bounds
        self.items = 0

    def _count(self, depth: int) -> None:
        bounds = self.bounds
        if bounds is None:
            return
        self.items += 1
        if self.items > bounds.max_items:
            raise BoundExceeded("max_items", f"the value holds more than {bounds.max_items:,} items")
        if depth > bounds.max_depth:
            raise BoundExceeded("max_depth", f"the value nests deeper than {bounds.max_depth} levels")

    def _text(self, value: Any, what: str, limit: int | None = None) -> Any:
        if self.bounds is not None and isinstance(value, str):
            limit = self.bounds.max_chars if limit is None else limit
            if len(value) > limit:
                raise BoundExceeded("max_chars", f"{what} of {len(value):,} characters (at most {limit:,})")
        return value

    def _list(self, data: Any, what: str) -> list[Any]:
        if not isinstance(data, list):
            raise ValueEncodingError(f"the items of a {what} must be a list, got {type(data).__name__}")
        if self.bounds is not None and len(data) > self.bounds.max_keys and what in ("dict", "set", "frozenset"):
            raise BoundExceeded("max_keys", f"a {what} of {len(data):,} keys (at most {self.bounds.max_keys:,})")
        return data

    def _spread(self, keys: list[Any], what: str) -> list[Any]:
        """`keys`, once no hash value is shared by more than `max_equal_hashes` of them."""
        if self.bounds is None:
            return keys
        limit = self.bounds.max_equal_hashes
        seen: dict[int, int] = {}  # hash values are ints below 2**61: distinct ones never collide here
        for key in keys:
            code = hash(key)  # TypeError for an unhashable key, as the dict itself would raise
            seen[code] = count = seen.get(code, 0) + 1
            if count > limit:
                raise BoundExceeded(
                    "max_equal_hashes",
                    f"more than {limit} keys of one {what} share a hash value (a hash-collision flood)",
                )
        return keys

    def value(self, data: Any, depth: int = 0) -> Any:
        self._count(depth)
        if isinstance(data, list):
            return [self.value(v, depth + 1) for v in data]
        if not isinstance(data, dict):
            return self._text(data, "a string")
        tag = data.get(TAG)
        if tag is None:
            return {self._text(k, "a key"): self.value(v, depth + 1) for k, v in data.items()}
        if tag == "dict":
            pairs = [(self.value(k, depth + 1), self.value(v, depth + 1)) for k, v in self._list(data["items"], tag)]
            self._spread([k for k, _ in pairs], "dict")
            return dict(pairs)
        if tag in ("tuple", "set", "frozenset"):
            items = [self.value(v, depth + 1) for v in self._list(data["items"], tag)]
            if tag == "tuple":
                return tuple(items)
            return set(self._spread(items, tag)) if tag == "set" else frozenset(self._spread(items, tag))
        if tag == "bytes":
            return __import__("base64").b64decode(self._text(data["b64"], "bytes"))
        import datetime
        import decimal

        builders: dict[str, Callable[[], Any]] = {
            "datetime": lambda: datetime.datetime.fromisoformat(self._text(data["iso"], "a datetime", MAX_ISO_CHARS)),
            "date": lambda: datetime.date.fromisoformat(self._text(data["iso"], "a date", MAX_ISO_CHARS)),
            "time": lambda: datetime.time.fromisoformat(self._text(data["iso"], "a time", MAX_ISO_CHARS)),
            "timedelta": lambda: datetime.timedelta(seconds=data["seconds"]),
            "Decimal": lambda: decimal.Decimal(self._text(data["text"], "a Decimal", MAX_DECIMAL_CHARS)),
            "complex": lambda: complex(*data["parts"]),
        }
        if tag not in builders:
            raise ValueEncodingError(f"unknown encoded type {str(tag)[:40]!r}")
        return builders[tag]()


def decode_value(data: Any, bounds: DecodeBounds | None = None) -> Any:
    """The value `encode_value` encoded; with `bounds`, refuses (`BoundExceeded`) a value past them."""
    return _Decoding(bounds).value(data)
