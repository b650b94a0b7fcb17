"""Import optional dependencies with an error that names the extra to install."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from rlm_adapters.errors import MissingExtraError


def require(module: str, *, extra: str, feature: str) -> ModuleType:
    """Import `module`, or raise `MissingExtraError` naming `extra`.

    Args:
        module: The importable module name, e.g. ``"langchain_core"``.
        extra: The rlm-adapters extra that installs it, e.g. ``"langchain"``.
        feature: What needs it, for the message, e.g. ``"ChatRLM"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(feature, extra, module) from exc


def is_loaded(module: str, names: Sequence[str] = ()) -> bool:
    """True when `module` is imported (not halfway, in another thread) and each of `names` is set on it.

    SDKs that load their parts on first access (``daytona``'s module ``__getattr__``) keep each part in the
    module's namespace once loaded, which is what `names` checks.
    """
    found = sys.modules.get(module)
    if found is None or getattr(getattr(found, "__spec__", None), "_initializing", False):
        return False
    return all(name in vars(found) for name in names)


async def require_off_loop(module: str, *, extra: str, feature: str, names: Sequence[str] = ()) -> ModuleType:
    """`require` from async code: the import (and `names`, looked up on the module) runs in a worker thread.

    A provider's SDK takes seconds to import (``daytona`` 6.7 s, ``anthropic`` 2.5 s on a busy machine); done
    on the event loop it would stop every other run and client of a server for that long (issue 41). Once it is
    loaded this returns at once, without a thread hop.
    """
    if not is_loaded(module, names):
        await asyncio.to_thread(_load, module, extra, feature, names)
    return require(module, extra=extra, feature=feature)


def _load(module: str, extra: str, feature: str, names: Sequence[str]) -> None:
    loaded = require(module, extra=extra, feature=feature)
    for name in names:
        getattr(loaded, name)
