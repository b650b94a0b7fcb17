"""A typed answer as plain JSON data.

A leaf module (no import from the package): `result.py` needs it, and `errors.py` names `RLMResult`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pydantic


def jsonable(value: Any) -> Any:
    """A typed answer as JSON data (a model or dataclass dumped, anything else as it is)."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return pydantic.TypeAdapter(type(value)).dump_python(value, mode="json")
    return value
