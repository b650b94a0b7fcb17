"""The documents among the files a load found, converted to text behind the walls (`rlm_adapters.documents`).

The loader lists files as it always did; those whose name is a document's (``.pdf``, ``.docx``, ...) or a
compressed file's (``.gz``, ``.bz2``, ``.xz``), and text files that are not UTF-8, are not read as text but
handed here: each is opened name by name from its root (the same ``O_NOFOLLOW``
opener as every file) by the conversion's own thread, converted in the sandbox, and comes back as a
`LoadedFile` carrying its format and places, or as a `SkippedFile` naming why. Their converted size counts
toward the load's byte cap; the load's deadline and cancellation stop the conversions too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from rlm_adapters.core.adapter_kit import human_bytes
from rlm_adapters.documents import (
    TEXT,
    ConversionProgress,
    DocumentJob,
    DocumentLimits,
    Format,
    convert_all,
    document_metadata,
)
from rlm_adapters.errors import FileLoadError
from rlm_adapters.files._loaded import LoadedFile, SkippedFile
from rlm_adapters.files._walk import Node, Tree, WalkLimits


def convert_found(
    tree: Tree,
    found: Sequence[tuple[Node, Format]],
    limits: DocumentLimits,
    walk: WalkLimits,
    budget: int,
    progress: Callable[[ConversionProgress], None] | None,
    max_bytes_name: str = "max_bytes=",
) -> list[LoadedFile | SkippedFile]:
    """Convert the documents `found` (in order); what each became.

    Args:
        tree: The load's roots (its opener is used from the conversion threads).
        found: Each document and its format.
        limits: The conversions' limits.
        walk: The load's deadline and cancel flag.
        budget: Bytes of converted text the load may still take (what is left of its cap).
        progress: Hears ``converting i/n ...``.
        max_bytes_name: How the caller's interface spells the byte cap, for its error.

    Raises:
        FileLoadError: The converted texts pass the cap, or the load ran out of time or was cancelled.
    """
    jobs = [
        DocumentJob(tree.display(node), fmt, functools.partial(tree.open, node, directory=False)) for node, fmt in found
    ]
    cancelled = walk.cancel
    batch = convert_all(
        jobs,
        limits,
        progress=progress,
        stop=None if cancelled is None else cancelled.is_set,
        deadline=walk.deadline,
        max_bytes=budget,
    )
    if batch.over_cap:
        raise FileLoadError(
            f"the documents' text comes to more than {human_bytes(budget)}, what is left of the cap "
            f"({max_bytes_name}) once the other files are read; narrow the paths or raise the cap"
        )
    if batch.stopped:
        walk.check()  # the load's own words for a cancellation or a deadline
    results: list[LoadedFile | SkippedFile] = []
    for job, outcome in zip(jobs, batch.outcomes, strict=True):
        if outcome is None or outcome.converted is None:
            results.append(SkippedFile(job.path, outcome.reason if outcome and outcome.reason else "not converted"))
            continue
        converted = outcome.converted
        metadata = document_metadata(converted, job.format.name, outcome.raw_size, job.format.compression)
        # Uncompressed text comes here only when it was not UTF-8 (the host reads UTF-8 itself).
        recoded = job.format == TEXT
        results.append(LoadedFile(job.path, converted.text, converted.size, recoded, metadata))
    return results
