"""Skip marks for tests that need an optional extra, safe to evaluate when the extra is missing."""

from __future__ import annotations

import importlib.util

import pytest


def installed(module: str) -> bool:
    """True when `module` can be imported.

    `importlib.util.find_spec("google.genai")` imports ``google`` first and raises when that is missing, which
    would crash collection instead of skipping; this answers False then.
    """
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def needs(module: str, extra: str) -> pytest.MarkDecorator:
    """Skip unless `module` is installed; the reason names the extra that brings it."""
    return pytest.mark.skipif(not installed(module), reason=f'needs {module} (pip install "rlm-adapters[{extra}]")')


needs_boto3 = needs("boto3", "bedrock")
needs_genai = needs("google.genai", "gemini")
needs_litellm = needs("litellm", "litellm")
needs_mcp = needs("mcp", "mcp")
