"""What a converted document carries beside its text, so that model code can select by page, slide or sheet.

``metadata["pages"]`` (PDF, and Word files that recorded their page breaks), ``["slides"]`` (PowerPoint,
OpenDocument presentations), ``["cells"]`` (notebooks) are lists of ``[start, end]`` character offsets,
item ``i`` being number ``i + 1``: ``text[start:end]`` is page 7 for ``pages[6]``. ``["sheets"]`` (Excel,
OpenDocument spreadsheets) maps each sheet's name to its ``[start, end]``. ``["places"]`` is the fine map
`rlm_adapters.sources` cites from: ``[offset, kind, label]`` in text order, each place running until the
next (spreadsheet cells included, ``Sheet1!B12``). ``["page_labels"]`` (a PDF that labels its pages) holds
each page's own label, item ``i`` for page ``i + 1`` (``"xii"``, ``"79"``); citations keep the page's
number and add its label where they differ (``p88 (79)``). ``["notes"]`` says what the converter could not
read or cut, if anything, and the encoding a text was read in when it was not UTF-8. ``["compression"]``
(``gzip``, ``bzip2``, ``xz``) names how a compressed file was packed.
"""

from __future__ import annotations

from typing import Any

from rlm_adapters.documents._output import Converted

# Which places a format's spans are made of, and the metadata key that lists them.
_SPANS = {"page": "pages", "slide": "slides", "sheet": "sheets"}


def document_metadata(converted: Converted, fmt: str, raw_size: int, compression: str | None = None) -> dict[str, Any]:
    """The metadata of a converted document (beside ``path`` and ``size``, which the loader adds).

    Args:
        converted: The checked conversion.
        fmt: The format's name (``pdf``; ``text`` for text decoded behind the walls).
        raw_size: The document's own size in bytes (compressed, when it was).
        compression: How the file was compressed (``gzip``, ``bzip2``, ``xz``), in the metadata when it was.
    """
    metadata: dict[str, Any] = {"format": fmt, "raw_size": raw_size}
    if compression is not None:
        metadata["compression"] = compression
    end = len(converted.text)
    spans: dict[str, list[tuple[str, int]]] = {}
    for offset, kind, label in converted.places:
        if fmt == "ipynb" and kind == "cell":
            spans.setdefault("cells", []).append((label, offset))
        elif kind in _SPANS:
            found = spans.setdefault(_SPANS[kind], [])
            if not found or found[-1][0] != label or kind != "sheet":  # a sheet resumed after its cells is one
                found.append((label, offset))
    for key, starts in spans.items():
        ranges = [[start, starts[i + 1][1] if i + 1 < len(starts) else end] for i, (_, start) in enumerate(starts)]
        if key == "sheets":
            metadata[key] = {label: span for (label, _), span in zip(starts, ranges, strict=True)}
        else:
            metadata[key] = ranges
    if converted.places:
        metadata["places"] = [list(place) for place in converted.places]
    if converted.page_labels:
        # One per page (its number where the PDF labels only some), as LlamaIndex's PDF reader names them.
        metadata["page_labels"] = [converted.page_labels.get(n, str(n)) for n in range(1, len(metadata["pages"]) + 1)]
    if converted.notes:
        metadata["notes"] = list(converted.notes)
    return metadata
