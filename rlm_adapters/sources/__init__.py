"""What reached a model during a run, the sources an answer cites from it, and its claims checked.

- `_provenance`: which documents (and which character ranges of each) crossed the sandbox boundary
  towards a model, matched on the host from the run's events (`_anchors` for long texts, `_needles` for
  the rest, both one C-speed pass);
- `_citations`: of those, the lines that support the answer (`Source`);
- `_claims` / `_check`: the answer's numbers, names, quotes and sentences, each supported or not (`Claim`);
- `_tracker`: `SourceTracker`, the one tracker every adapter uses, and the trajectory record.

A service beside the engine: it reads the engine's events and returns `rlm_adapters.core.result.Source`
and `Claim` (defined there so that `RLMResult` carries them without the engine loading this package); it
imports no adapter, and `rlm_adapters.core` does not import it.
"""

from rlm_adapters.core import Claim, Place, Source
from rlm_adapters.sources._check import NOWHERE
from rlm_adapters.sources._citations import MAX_SOURCES, cite, sources_block
from rlm_adapters.sources._documents import Document, documents_of
from rlm_adapters.sources._provenance import DocumentUse, ProvenanceTracker
from rlm_adapters.sources._tracker import Corpus, Findings, SourceTracker

__all__ = [
    "MAX_SOURCES",
    "NOWHERE",
    "Claim",
    "Corpus",
    "Document",
    "DocumentUse",
    "Findings",
    "Place",
    "ProvenanceTracker",
    "Source",
    "SourceTracker",
    "cite",
    "documents_of",
    "sources_block",
]
