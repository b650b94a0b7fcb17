"""A provider's prompt cache as Anthropic runs it, for the fake servers that speak its wire formats.

A request is a sequence of content blocks (the system prompt's, then each message's); some end a cached
prefix (a *breakpoint*: Anthropic's ``cache_control``, Bedrock's ``cachePoint``). The bill, as Anthropic
documents it:

- a prefix is read from the cache only if an earlier request wrote it: at a breakpoint of this request, or
  at a block boundary up to 20 blocks before one (the look-back); the longest such prefix is read;
- from there up to the last breakpoint is written (each breakpoint's prefix becomes an entry), unless the
  prefix is shorter than the model's minimum, which caches nothing;
- the rest is plain input. Reads cost 0.1x the input price, writes 1.25x (5-minute entries) or 2x (1-hour);
  a read refreshes the entry's lifetime.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LOOKBACK_BLOCKS = 20
MAX_BREAKPOINTS = 4
TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
# Anthropic's prices of cached input, as multiples of the input price.
READ_RATE = 0.1
WRITE_RATES = {"5m": 1.25, "1h": 2.0}


@dataclass(frozen=True)
class Block:
    """One content block of a request: its wire form (what the cache key covers), its tokens, and the TTL
    of the breakpoint it carries (None: no breakpoint)."""

    key: Any
    tokens: int
    breakpoint: str | None = None


@dataclass(frozen=True)
class CacheUse:
    """How one request's input was billed."""

    input_tokens: int  # plain input (after the last breakpoint, or everything without a hit or a write)
    cache_read_tokens: int
    cache_write_5m_tokens: int
    cache_write_1h_tokens: int

    @property
    def cache_write_tokens(self) -> int:
        """Tokens written, whatever their lifetime."""
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens


@dataclass
class Bill:
    """What the fake server charged so far, in tokens of each kind."""

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_5m_tokens: int = 0
    cache_write_1h_tokens: int = 0
    requests: int = 0

    def add(self, use: CacheUse) -> None:
        """Count one request's bill."""
        self.input_tokens += use.input_tokens
        self.cache_read_tokens += use.cache_read_tokens
        self.cache_write_5m_tokens += use.cache_write_5m_tokens
        self.cache_write_1h_tokens += use.cache_write_1h_tokens
        self.requests += 1

    @property
    def input_units(self) -> float:
        """The input billed, in plain-input-token equivalents (reads 0.1x, writes 1.25x or 2x)."""
        return (
            self.input_tokens
            + READ_RATE * self.cache_read_tokens
            + WRITE_RATES["5m"] * self.cache_write_5m_tokens
            + WRITE_RATES["1h"] * self.cache_write_1h_tokens
        )

    def input_cost(self, usd_per_mtok: float) -> float:
        """The input cost at a model's input price (USD per million tokens)."""
        return self.input_units * usd_per_mtok / 1_000_000


@dataclass
class PromptCache:
    """The cache entries of one fake server (per model), and what it billed.

    Args:
        min_tokens: The shortest prefix the model caches (Anthropic: 1,024 tokens for Sonnet and Opus 4,
            more for some models); a breakpoint before that caches nothing.
        clock: Seconds, for entry lifetimes.
    """

    min_tokens: int = 1024
    clock: Callable[[], float] = time.monotonic
    bill: Bill = field(default_factory=Bill)
    _entries: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        """Forget every entry and the bill."""
        with self._lock:
            self._entries.clear()
            self.bill = Bill()

    def account(self, model: str, blocks: list[Block]) -> CacheUse:
        """Bill one request: read the longest prefix written before, write up to its last breakpoint."""
        keys = _prefix_keys(model, blocks)
        totals = [0]
        for block in blocks:
            totals.append(totals[-1] + block.tokens)
        marks = [i + 1 for i, b in enumerate(blocks) if b.breakpoint is not None and totals[i + 1] >= self.min_tokens]
        now = self.clock()
        with self._lock:
            hit = 0
            for mark in marks:
                for end in range(mark, max(0, mark - LOOKBACK_BLOCKS) - 1, -1):
                    if end > hit and self._entries.get(keys[end], -1.0) > now:
                        hit = end
                        break
            last = max(marks, default=0)
            written = {"5m": 0, "1h": 0}
            start = hit
            for mark in marks:
                if mark <= hit:
                    continue
                ttl = blocks[mark - 1].breakpoint or "5m"
                written[ttl] += totals[mark] - totals[start]
                start = mark
                self._entries[keys[mark]] = now + TTL_SECONDS[ttl]
            if hit:
                lifetime = max(TTL_SECONDS[blocks[hit - 1].breakpoint or "5m"], self._entries[keys[hit]] - now)
                self._entries[keys[hit]] = now + lifetime
            use = CacheUse(
                input_tokens=totals[-1] - totals[max(last, hit)],
                cache_read_tokens=totals[hit],
                cache_write_5m_tokens=written["5m"],
                cache_write_1h_tokens=written["1h"],
            )
            self.bill.add(use)
        return use


def _prefix_keys(model: str, blocks: list[Block]) -> list[str]:
    """The cache key of every prefix (``keys[k]`` covers the first k blocks), one incremental hash."""
    digest = hashlib.sha256(model.encode("utf-8"))
    keys = [digest.hexdigest()]
    for block in blocks:
        digest.update(json.dumps(block.key, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        keys.append(digest.copy().hexdigest())
    return keys
