"""Offline token counting, and the `8k,32k,131k` length syntax of `rlm eval`.

tiktoken downloads its BPE files on first use, which fails without network. llama-index-core ships the
cl100k_base and o200k_base files in its package data under tiktoken's own cache names, so pointing
``TIKTOKEN_CACHE_DIR`` there makes `tiktoken.get_encoding` work offline (llama-index does the same).
"""

from __future__ import annotations

import functools
import os
import threading
from importlib import util
from pathlib import Path
from typing import Any, Literal

from rlm_adapters._extras import require
from rlm_adapters.errors import ConfigurationError

EncodingName = Literal["cl100k_base", "o200k_base"]
DEFAULT_ENCODING: EncodingName = "o200k_base"
_LOCK = threading.Lock()


def bundled_cache_dir() -> Path | None:
    """The folder inside llama-index-core holding tiktoken's cached BPE files, if installed."""
    spec = util.find_spec("llama_index.core")
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "_static" / "tiktoken_cache"
    return folder if folder.is_dir() else None


@functools.cache
def get_encoding(name: EncodingName = DEFAULT_ENCODING) -> Any:
    """A tiktoken encoding that loads without network access.

    Raises:
        MissingExtraError: when tiktoken is not installed.
    """
    tiktoken = require("tiktoken", extra="eval", feature="rlm eval token counting")
    with _LOCK:
        # Only fill the variable when unset: a user's own cache directory wins.
        folder = bundled_cache_dir()
        if folder is not None and "TIKTOKEN_CACHE_DIR" not in os.environ:
            os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
        return tiktoken.get_encoding(name)


def count_tokens(text: str, encoding: EncodingName = DEFAULT_ENCODING) -> int:
    """The number of tokens of `text` (special-token strings are counted as plain text)."""
    return len(get_encoding(encoding).encode(text, disallowed_special=()))


def parse_length(text: str) -> int:
    """Parse one length: ``8192``, ``2^13``, ``8k`` or ``1m``.

    ``Nk`` / ``Nm`` mean the power of two whose leading digits they are (``8k`` = 8192, ``131k`` = 131072,
    ``1m`` = 1048576), as the paper writes its power-of-two lengths; otherwise N * 1000 (N * 1,000,000).

    Raises:
        ConfigurationError: for anything else, or a length under 1,024 tokens.
    """
    raw = text.strip().lower()
    value: int | None = None
    try:
        if "^" in raw:
            base, _, power = raw.partition("^")
            value = int(base) ** int(power)
        elif raw[-1:] in ("k", "m"):
            number, scale = int(raw[:-1]), 1000 if raw[-1] == "k" else 1_000_000
            powers = [2**p for p in range(10, 31) if 2**p // scale == number]
            value = powers[0] if powers else number * scale
        else:
            value = int(raw)
    except ValueError:
        value = None
    if value is None or value < 1024:
        raise ConfigurationError(f"length {text!r} must be an integer >= 1024, like 8192, 2^13 or 8k")
    return value


def parse_lengths(text: str) -> list[int]:
    """Parse a comma-separated list of lengths (``8k,32k,131k``), keeping its order."""
    return [parse_length(part) for part in text.split(",") if part.strip()]


def format_length(tokens: int) -> str:
    """The short form of a length: 8192 -> ``8k``, 131072 -> ``131k``, 1048576 -> ``1m``."""
    if tokens >= 1_000_000:
        return f"{tokens // 1_000_000}m"
    if tokens >= 1000:
        return f"{tokens // 1000}k"
    return str(tokens)
