"""Conversions kept for the life of the process, by content hash: a second question does not convert again.

Keyed by the SHA-256 of the document's bytes, its format and the limits it was converted under, so an
edited file (new bytes) or a raised limit converts afresh, and a renamed or copied one does not. What is
kept: the checked text and places, or a refusal that is the document's own (encrypted, malformed, a zip
bomb); never a timeout or a killed converter, which another try with more room may pass. Bounded by the
characters held (least recently used first out). A second map remembers which digest a file's
``(device, inode, size, mtime, ctime)`` had, so a file unchanged since the last call is not even read.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from rlm_adapters.documents._output import Converted, Refusal

MAX_CACHED_CHARS = 256 * 1024**2
MAX_STAT_ENTRIES = 100_000

StatKey = tuple[int, int, int, int, int]


class ConversionCache:
    """A thread-safe LRU of conversions, bounded by the characters of the texts it holds.

    Args:
        max_chars: Characters (of all cached texts together) it may hold.
    """

    def __init__(self, max_chars: int = MAX_CACHED_CHARS) -> None:
        self.max_chars = max_chars
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, Converted | Refusal] = OrderedDict()
        self._chars = 0
        self._digests: OrderedDict[StatKey, str] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Converted | Refusal | None:
        """The conversion stored under `key` (now the most recently used), or None."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, value: Converted | Refusal) -> None:
        """Keep `value` under `key`, dropping the least recently used past the cap (a text over it is not kept)."""
        size = len(value.text) if isinstance(value, Converted) else 0
        if size > self.max_chars:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if isinstance(old, Converted):
                self._chars -= len(old.text)
            self._entries[key] = value
            self._chars += size
            while self._chars > self.max_chars and self._entries:
                _, dropped = self._entries.popitem(last=False)
                if isinstance(dropped, Converted):
                    self._chars -= len(dropped.text)

    def digest_of(self, stat: StatKey) -> str | None:
        """The digest last computed for a file with this exact `stat` key, or None."""
        with self._lock:
            return self._digests.get(stat)

    def remember_digest(self, stat: StatKey, digest: str) -> None:
        """Remember `digest` for a file with this `stat` key."""
        with self._lock:
            self._digests[stat] = digest
            self._digests.move_to_end(stat)
            while len(self._digests) > MAX_STAT_ENTRIES:
                self._digests.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    @property
    def chars(self) -> int:
        """Characters of the cached texts."""
        with self._lock:
            return self._chars

    def clear(self) -> None:
        """Forget every conversion and digest, and the counts."""
        with self._lock:
            self._entries.clear()
            self._digests.clear()
            self._chars = 0
            self.hits = self.misses = 0


CONVERSIONS = ConversionCache()


def forget_conversions() -> None:
    """Forget every conversion kept (`CONVERSIONS`): the next call converts again."""
    CONVERSIONS.clear()
