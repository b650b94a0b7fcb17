"""Import optional dependencies with an error that names the extra to install."""

from __future__ import annotations

import importlib
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
