"""Equality, hash and repr of the engine's record dataclasses (events, results), written once.

`dataclasses.dataclass` compiles every method it generates, for every class, when the module is imported:
the events and results (16 classes) cost a first call about 10 ms of compiling ``__eq__``, ``__repr__`` and a
frozen class's ``__hash__`` (issue 41). Those classes take ``eq=False, repr=False`` and inherit these methods,
which behave as the generated ones: equal when of the same class and equal in every compared field (the
fields as a tuple), a frozen record hashed over the same fields (or those marked ``hash=True``), shown as
``Name(field=value, ...)`` with the fields marked ``repr=False`` left out. Only ``__init__`` (and a frozen
class's ``__setattr__`` / ``__delattr__``) are still generated.
"""

from __future__ import annotations

import reprlib
from dataclasses import fields
from typing import Any, ClassVar


def _compared(record: Any) -> tuple[Any, ...]:
    return tuple(getattr(record, f.name) for f in fields(record) if f.compare)


class Record:
    """A dataclass's ``__eq__`` and ``__repr__``; unhashable, as a dataclass with ``eq`` that is not frozen."""

    __slots__ = ()
    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return _compared(self) == _compared(other)

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)  # type: ignore[arg-type]
        return f"{self.__class__.__qualname__}({shown})"


class FrozenRecord(Record):
    """`Record` for a frozen dataclass: hashed over its compared fields, as the generated ``__hash__``."""

    __slots__ = ()

    def __hash__(self) -> int:  # type: ignore[override]
        chosen = (f for f in fields(self) if (f.compare if f.hash is None else f.hash))  # type: ignore[arg-type]
        return hash(tuple(getattr(self, f.name) for f in chosen))
