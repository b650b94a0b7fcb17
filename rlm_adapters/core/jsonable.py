"""A typed answer as plain JSON data.

A leaf module (no import from the package): `result.py` needs it, and `errors.py` names `RLMResult`.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any


def jsonable(value: Any) -> Any:
    """A typed answer as JSON data (a model or dataclass dumped, anything else as it is)."""
    # Pydantic loads when a typed answer needs it, not with the engine; before something has imported it,
    # no value can be one of its models.
    loaded = sys.modules.get("pydantic")
    if loaded is not None and isinstance(value, loaded.BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        pydantic = importlib.import_module("pydantic")
        return pydantic.TypeAdapter(type(value)).dump_python(value, mode="json")
    return value
