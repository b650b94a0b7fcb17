"""A face whose names load their modules on first use (PEP 562): one `__getattr__` and `__dir__` for all four.

``import rlm_adapters`` and the engine's faces stay cheap because a name's module is imported only when the name
is first read. A face builds a `LazyNames` from its table and binds ``__getattr__ = names.load`` and
``__dir__ = names.listing``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any


class LazyNames:
    """The lazily loaded names of one face.

    Args:
        face: The face's module name (its ``__name__``).
        names: Each name -> the module that defines it, or (module, the attribute's name there).
        keep: Bind a loaded value on the face, so the next read is a plain attribute. False re-reads the defining
            module each time, so that a test patching that module is seen by the next lookup.
    """

    def __init__(self, face: str, names: Mapping[str, str | tuple[str, str]], *, keep: bool) -> None:
        self.face = face
        self.names = {name: (where, name) if isinstance(where, str) else where for name, where in names.items()}
        self.keep = keep

    def load(self, name: str) -> Any:
        """The face's ``__getattr__``: import the module defining `name` and read it."""
        found = self.names.get(name)
        if found is None:
            raise AttributeError(f"module {self.face!r} has no attribute {name!r}")
        module, attribute = found
        value = getattr(importlib.import_module(module), attribute)
        if self.keep:
            setattr(sys.modules[self.face], name, value)
        return value

    def listing(self) -> list[str]:
        """The face's ``__dir__``: what it holds and every public name, loaded or not."""
        module = sys.modules[self.face]
        return sorted({*vars(module), *getattr(module, "__all__", ())})
