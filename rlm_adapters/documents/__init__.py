"""Documents (PDF, Word, PowerPoint, Excel, HTML, EPUB, OpenDocument, RTF, notebooks; compressed files and text
that is not UTF-8) to text, behind the walls.

A document is untrusted input, and parsers have CVEs, so the host never parses one: each is copied into a
private folder and converted by `rlm_adapters/core/sandbox/programs/converter.py`, started once per
document by the subprocess sandbox's launcher (`core/sandbox/subprocess/oneshot.py`: bubblewrap or the
level ``auto`` picks, Landlock, seccomp, no network, no host file but the document and the libraries read
only), under a time, memory and text limit per document (`DocumentLimits`). What comes back is checked
before use. The converted text keeps its places (``[offset, kind, label]``: where each page, slide, sheet
or cell starts), which `rlm_adapters.sources` turns into citations such as ``contract.pdf:p12:L4``.

One job per module: `_formats` (which files are documents, their signatures and libraries), `_convert`
(one document: copy, hash, cache, convert, check), `_output` (the converter's answer, checked), `_cache`
(`CONVERSIONS`, by content hash, in memory), `_store` (the same on disk, across processes: a folder of the
user's, checked like the call cache), `_batch` (many at once, with progress),
`_metadata` (what a document item carries for model code); `formats/` holds each format's converter,
which runs only inside the sandbox. The file loader (`rlm_adapters.files`) calls it; it imports only the
core's sandbox launcher, units and errors, never an adapter, and nothing in `rlm_adapters.core` imports it.
"""

from rlm_adapters.documents._batch import Batch, ConversionProgress, DocumentJob, convert_all
from rlm_adapters.documents._binary import binary_kind
from rlm_adapters.documents._cache import CONVERSIONS, ConversionCache, forget_conversions
from rlm_adapters.documents._convert import DocumentLimits, Outcome, convert_fd
from rlm_adapters.documents._formats import (
    COMPRESSIONS,
    FORMATS,
    TEXT,
    Format,
    format_of,
    library_paths,
    unsupported_reason,
)
from rlm_adapters.documents._metadata import document_metadata
from rlm_adapters.documents._output import Converted
from rlm_adapters.documents._store import ConversionStore, converter_identity

__all__ = [
    "COMPRESSIONS",
    "CONVERSIONS",
    "FORMATS",
    "TEXT",
    "Batch",
    "ConversionCache",
    "ConversionProgress",
    "ConversionStore",
    "Converted",
    "DocumentJob",
    "DocumentLimits",
    "Format",
    "Outcome",
    "binary_kind",
    "convert_all",
    "convert_fd",
    "converter_identity",
    "document_metadata",
    "forget_conversions",
    "format_of",
    "library_paths",
    "unsupported_reason",
]
