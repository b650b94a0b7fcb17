"""Skip marks for the model clients' tests that need an optional SDK (`tests/extras.py` says how)."""

from __future__ import annotations

from tests.extras import installed, needs

__all__ = ["installed", "needs", "needs_boto3", "needs_genai", "needs_litellm", "needs_mcp"]

needs_boto3 = needs("boto3", "bedrock")
needs_genai = needs("google.genai", "gemini")
needs_litellm = needs("litellm", "litellm")
needs_mcp = needs("mcp", "mcp")
