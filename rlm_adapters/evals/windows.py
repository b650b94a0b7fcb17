"""Known models' input windows, so that ``direct`` and ``compaction`` know when a prompt does not fit.

Figures are input tokens as the providers publish them (GPT-5's 272K is the figure the RLM paper uses);
``--context-window`` overrides, and a model not listed has no known window.
"""

from __future__ import annotations

# Longest prefix wins: "gpt-5-mini-2025-08-07" matches "gpt-5-mini", "openai/gpt-5" matches "gpt-5".
KNOWN_WINDOWS: dict[str, int] = {
    "gpt-5": 272_000,
    "gpt-5-mini": 272_000,
    "gpt-5-nano": 272_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude-opus-4": 200_000,
    "claude-sonnet-4": 200_000,
    "claude-3-5-sonnet": 200_000,
    "claude-3-7-sonnet": 200_000,
    "claude-haiku-4": 200_000,
    "qwen3-coder-480b-a35b": 262_144,
    "qwen3-8b": 32_768,
}


def known_window(model: str | None) -> int | None:
    """The input window of `model` (a provider prefix such as ``openai/`` is ignored), or None."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()
    matches = [prefix for prefix in KNOWN_WINDOWS if name.startswith(prefix)]
    return KNOWN_WINDOWS[max(matches, key=len)] if matches else None
