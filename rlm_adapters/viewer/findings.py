"""A run's findings (its cited sources and unsupported claims) from the log's last ``sources`` record.

The record is written by `rlm_adapters.sources.SourceTracker.apply` once a finished run was cited. Like every
record it is untrusted: a hostile log may put anything in it, so entries of the wrong shape are skipped (the
findings are an addition to the run's tree, not a reason to refuse the log), texts come back with lone
surrogates escaped (`records.clean_text`), and numbers are taken only when they are whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from rlm_adapters.core import Place, PlaceKind
from rlm_adapters.viewer.log_reader import MAX_COUNT, clean_text

_PLACE_KINDS = frozenset(get_args(PlaceKind))


@dataclass
class Findings:
    """What a run's answer rests on, from the log's sources record.

    Attributes:
        sources: ``path:lines`` (or ``path:p12:L4`` for a line of a page) of each cited source, best first.
        unsupported: ``(claim, why)`` for each claim no text that reached a model holds.
        supported: How many claims are supported.
        note: Why there are no sources (or only the ranges read), when the record says.
    """

    sources: list[str] = field(default_factory=list)
    unsupported: list[tuple[str, str]] = field(default_factory=list)
    supported: int = 0
    note: str | None = None


def findings_of(record: dict[str, Any]) -> Findings:
    """The findings of a sources record, whatever a hostile log put in it (bad entries are skipped)."""
    note, sources, claims = record.get("note"), record.get("sources"), record.get("claims")
    found = Findings(note=clean_text(note) if isinstance(note, str) else None)
    for source in sources if isinstance(sources, list) else []:
        if isinstance(source, dict) and isinstance(source.get("path"), str):
            where = _where(source)
            path = clean_text(source["path"])
            found.sources.append(f"{path}:{where}" if where else path)
    for claim in claims if isinstance(claims, list) else []:
        if not isinstance(claim, dict):
            continue
        if claim.get("status") == "supported":
            found.supported += 1
        else:
            found.unsupported.append((_text(claim.get("text")), _text(claim.get("reason"))))
    return found


def _where(source: dict[str, Any]) -> str:
    place = source.get("place")
    if isinstance(place, dict) and place.get("kind") in _PLACE_KINDS:
        end, first = place.get("end"), _line(place.get("line_start"))
        lines = (first, max(first, _line(place.get("line_end")))) if first else (None, None)
        return str(Place(place["kind"], _text(place.get("start")), _text(end) if end is not None else None, *lines))
    first, last = _line(source.get("line_start")), _line(source.get("line_end"))
    if first == 0:
        return ""  # the file itself (an answer that names it), not a span of its lines
    span = str(first) if first == last else f"{first}-{last}"
    start, stop = _offset(source.get("char_start")), _offset(source.get("char_end"))
    if start is not None and stop is not None:  # a span of a line too long to cite by
        return f"{span} chars {start:,}-{stop:,}"
    return span


def _offset(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1 << 62 else None


def _line(value: Any) -> int:
    # Whole numbers only: a float (Infinity, 1e308) or a bool is no line number.
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT else 0


def _text(value: Any) -> str:
    return clean_text(value) if isinstance(value, str) else ""
