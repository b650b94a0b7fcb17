"""Conversions kept by content hash, in memory for the life of the process and on disk (`_store`) across them.

Keyed by the SHA-256 of the document's bytes, its format and the limits it was converted under, so an
edited file (new bytes) or a raised limit converts afresh, and a renamed or copied one does not. What is
kept: the checked text and places, or a refusal that is the document's own (encrypted, malformed, a zip
bomb); never a timeout or a killed converter, which another try with more room may pass. Bounded by the
characters held (least recently used first out). A second map remembers which digest a file's
``(device, inode, size, mtime, ctime)`` had, so a file unchanged since the last call is not even read.

Behind the memory sits an optional `ConversionStore` (a folder of this user's): a miss in memory is looked up
there, and every conversion kept here is written there too, so another process (the next ``rlm ask``, an
``rlm-mcp`` server, a notebook's `RLMQueryEngine.from_paths`) finds it. `CONVERSIONS`, which every loader
uses, takes its store from the environment (``RLM_DOCUMENT_CACHE``; see `_store`), found again whenever the
variables change; `use_store` sets one for the process instead.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Literal

from rlm_adapters.documents._output import Converted, Refusal
from rlm_adapters.documents._store import ENV_FOLDER, ENV_SIZE, ConversionStore, converter_identity, store_settings

MAX_CACHED_CHARS = 256 * 1024**2
MAX_STAT_ENTRIES = 100_000

StatKey = tuple[int, int, int, int, int]
StoreChoice = ConversionStore | None | Literal["environment"]


class ConversionCache:
    """A thread-safe LRU of conversions, bounded by the characters of the texts it holds.

    Args:
        max_chars: Characters (of all cached texts together) it may hold.
        store: The on-disk store behind it: a `ConversionStore`, None (memory only), or ``"environment"`` (the
            one ``RLM_DOCUMENT_CACHE`` names, the default's of `CONVERSIONS`).
    """

    def __init__(self, max_chars: int = MAX_CACHED_CHARS, store: StoreChoice = None) -> None:
        self.max_chars = max_chars
        self._choice: StoreChoice = store
        self._resolved: tuple[tuple[str | None, str | None], ConversionStore | None] | None = None
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, Converted | Refusal] = OrderedDict()
        self._chars = 0
        self._digests: OrderedDict[StatKey, str] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.stored_hits = 0

    def store(self) -> ConversionStore | None:
        """The on-disk store in use (None: memory only), opened and checked at first need.

        Raises:
            DocumentCacheError: The folder the environment names cannot be trusted (each call says it again).
            ConfigurationError: ``RLM_DOCUMENT_CACHE_SIZE`` is not a size.
        """
        choice = self._choice
        if choice != "environment":
            return choice if isinstance(choice, ConversionStore) else None
        wanted = (os.environ.get(ENV_FOLDER), os.environ.get(ENV_SIZE))
        with self._lock:
            if self._resolved is not None and self._resolved[0] == wanted:
                return self._resolved[1]
            settings = store_settings(os.environ)
            store = None if settings is None else ConversionStore(*settings)
            self._drop_resolved()
            self._resolved = (wanted, store)
            return store

    def use_store(self, store: StoreChoice) -> None:
        """Keep conversions in `store` from now on (None: in memory only; ``"environment"``: as the variables say)."""
        with self._lock:
            self._drop_resolved()
            self._choice = store

    def _drop_resolved(self) -> None:
        if self._resolved is not None and self._resolved[1] is not None:
            self._resolved[1].close()
        self._resolved = None

    def get(self, key: Hashable) -> Converted | Refusal | None:
        """The conversion stored under `key` (now the most recently used), or None; memory first, then the store.

        Raises:
            DocumentCacheError: The store, or its entry for `key`, cannot be trusted.
        """
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self.hits += 1
                self._entries.move_to_end(key)
                return found
        store = self.store()
        kept = None if store is None else store.get(key)
        with self._lock:
            if kept is None:
                self.misses += 1
                return None
            self.hits += 1
            self.stored_hits += 1
        self._remember(key, kept)
        return kept

    def put(self, key: Hashable, value: Converted | Refusal) -> None:
        """Keep `value` under `key`, in memory (least recently used out past the cap) and in the store."""
        self._remember(key, value)
        store = self.store()
        if store is not None:
            store.put(key, value)

    def _remember(self, key: Hashable, value: Converted | Refusal) -> None:
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
        """Forget every conversion and digest held in memory, and the counts (the store's files stay)."""
        with self._lock:
            self._entries.clear()
            self._digests.clear()
            self._chars = 0
            self.hits = self.misses = self.stored_hits = 0


CONVERSIONS = ConversionCache(store="environment")


def forget_conversions() -> None:
    """Forget the conversions `CONVERSIONS` holds in memory and the store it opened (the next call finds its
    store from the environment again; what the store holds on disk stays), and the converter's identity."""
    CONVERSIONS.clear()
    CONVERSIONS.use_store("environment")
    converter_identity.cache_clear()
