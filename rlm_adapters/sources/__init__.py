"""What reached a model during a run, and the sources an answer cites from it.

- `_provenance`: which documents (and which character ranges of each) crossed the sandbox boundary
  towards a model (`ProvenanceTracker`, over a `DocumentIndex`);
- `_citations`: of those, the lines that support the answer (`SourceTracker` -> `Source`).

A service beside the engine: it reads the engine's events and returns `rlm_adapters.core.result.Source`
(defined there so that `RLMResult` carries sources without the engine loading this package); it imports
no adapter, and `rlm_adapters.core` does not import it.
"""

from rlm_adapters.core.result import Source
from rlm_adapters.sources._citations import (
    MAX_INDEXED_CHARS,
    MAX_SOURCES,
    SourceTracker,
    cite,
    documents_of,
    line_of,
    line_starts,
    sources_block,
)
from rlm_adapters.sources._provenance import DocumentIndex, DocumentUse, ProvenanceTracker

__all__ = [
    "MAX_INDEXED_CHARS",
    "MAX_SOURCES",
    "DocumentIndex",
    "DocumentUse",
    "ProvenanceTracker",
    "Source",
    "SourceTracker",
    "cite",
    "documents_of",
    "line_of",
    "line_starts",
    "sources_block",
]
