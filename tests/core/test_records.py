"""The events and results compare, hash and show themselves exactly as the dataclasses they replace would (issue 41)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from rlm_adapters.core import events, result
from rlm_adapters.core.record_base import FrozenRecord, Record
from rlm_adapters.core.usage import UsageSummary

RECORDS = sorted(
    (
        value
        for module in (events, result)
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, Record)
        and dataclasses.is_dataclass(value)
        and value is not events.Event  # only its subclasses are made (they set `kind`)
    ),
    key=lambda cls: cls.__name__,
)


def _sample(annotation: str, seed: int) -> Any:
    """A value fit for a field annotated `annotation` (the annotations are strings here)."""
    kinds: dict[str, Any] = {"str": f"text {seed}", "int": seed, "float": seed + 0.5, "bool": bool(seed % 2)}
    head = annotation.split("[")[0].split(" |")[0]
    if head == "UsageSummary":
        return UsageSummary()
    if head in ("list", "dict"):
        return [seed] if head == "list" else {"k": seed}
    return kinds.get(head, "final" if "Literal" in annotation or "Reason" in annotation else None)


def _make(cls: type, seed: int) -> Any:
    values = {f.name: _sample(str(f.type), seed) for f in dataclasses.fields(cls) if f.init}
    if cls is result.Place:
        values["kind"] = "page"
    return cls(**values)


def _twin(cls: type) -> type:
    """What plain ``@dataclass`` (eq and repr generated) makes of the same fields and options."""
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    specs = [
        (
            f.name,
            f.type,
            dataclasses.field(
                default=f.default,
                default_factory=f.default_factory,
                init=f.init,
                repr=f.repr,
                hash=f.hash,
                compare=f.compare,
                kw_only=f.kw_only,
            ),
        )
        for f in dataclasses.fields(cls)
    ]
    twin = dataclasses.make_dataclass(cls.__name__, specs, frozen=params.frozen)
    twin.__qualname__ = cls.__qualname__
    return twin


def _as_twin(record: Any, twin: type) -> Any:
    made = twin(**{f.name: getattr(record, f.name) for f in dataclasses.fields(record) if f.init})
    for f in dataclasses.fields(record):
        if not f.init:
            object.__setattr__(made, f.name, getattr(record, f.name))
    return made


def test_every_event_and_result_record_is_covered() -> None:
    names = {cls.__name__ for cls in RECORDS}
    assert issubclass(events.Event, Record) and "__eq__" not in vars(events.Event)
    assert {"RunStarted", "RunFinished", "RLMResult", "Source", "Claim", "Place", "ToolCall"} <= names
    for cls in RECORDS:  # none regenerates what `Record` gives
        assert "__eq__" not in vars(cls) and "__repr__" not in vars(cls), cls


@pytest.mark.parametrize("cls", RECORDS, ids=[cls.__name__ for cls in RECORDS])
def test_eq_hash_and_repr_are_the_generated_ones(cls: type) -> None:
    twin = _twin(cls)
    one, same, other = _make(cls, 1), _make(cls, 1), _make(cls, 2)
    if isinstance(one, events.Event):
        same.time = one.time  # the default factory's clock
    assert repr(one) == repr(_as_twin(one, twin)) and repr(other) == repr(_as_twin(other, twin))
    assert (one == same) is (_as_twin(one, twin) == _as_twin(same, twin)) is True
    assert (one == other) is (_as_twin(one, twin) == _as_twin(other, twin)) is False
    assert one != _as_twin(one, twin) and one.__eq__(object()) is NotImplemented  # another class is never equal
    if issubclass(cls, FrozenRecord):
        assert _outcome(hash, one) == _outcome(hash, _as_twin(one, twin)) == _outcome(hash, same)
        with pytest.raises(dataclasses.FrozenInstanceError):
            one.start = "changed"
    else:
        with pytest.raises(TypeError, match="unhashable"):
            hash(one)
        with pytest.raises(TypeError, match="unhashable"):
            hash(_as_twin(one, twin))


def _outcome(function: Any, value: Any) -> Any:
    """What `function(value)` returns, or the type of what it raises (a record holding a dict is unhashable)."""
    try:
        return function(value)
    except TypeError as exc:
        return type(exc)


def test_a_record_that_holds_itself_shows_dots_as_a_dataclass_does() -> None:
    looped = _make(result.RLMResult, 1)
    looped.metadata = {"self": looped}
    assert "metadata={'self': ...}" in repr(looped)
