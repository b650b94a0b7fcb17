"""The files of a run's input that its answer names (a listing, "the largest is docs/a.md").

Such an answer rests on the file itself, not on a line of it: each file it names is cited at file level
(a `Source` with line 0, shown as ``docs/a.md``). Only documents the run's input held as files (a
``metadata["path"]``, as the file loaders give) count: a file that was skipped (binary, a symlink out of the
roots, a bad entry) is not a document, and inline text or ``context[0]`` is not a file. A name counts where
it stands whole: ``docs/a.md`` is not named by ``docs/a.md.bak`` or ``old/docs/a.md``. One Aho–Corasick
pass over the answer for every file name at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlm_adapters.core import Source
from rlm_adapters.sources._documents import Document
from rlm_adapters.sources._scan import scan

# Characters that glue a name to a longer path or word when they touch it.
_GLUE = frozenset("_/\\-@#+")


def named_files(answer: str, documents: Sequence[Document]) -> list[tuple[int, int, int]]:
    """Where the answer names a file of the input: ``(document, start, end)`` in answer order.

    Where two names overlap (``a.md`` inside ``docs/a.md`` cannot, being glued, but two documents may
    share a path), the longer one, then the first document, is kept.
    """
    files = [number for number, document in enumerate(documents) if document.file]
    if not files or not answer:
        return []
    paths = [documents[number].path for number in files]
    found = [
        (offset, offset + len(paths[which]), files[which])
        for which, _, offset in scan([(0, answer, 0, len(answer))], paths)
        if _whole(answer, offset, offset + len(paths[which]))
    ]
    found.sort(key=lambda hit: (hit[0], -(hit[1] - hit[0]), hit[2]))
    named: list[tuple[int, int, int]] = []
    for start, end, number in found:
        if named and start < named[-1][2]:
            continue
        named.append((number, start, end))
    return named


def file_sources(documents: Sequence[Document], named: Sequence[tuple[int, int, int]]) -> list[Source]:
    """Each file named once, in the order the answer first names it, as a file-level source."""
    seen: dict[int, None] = dict.fromkeys(number for number, _, _ in named)
    return [Source(documents[number].path, 0, 0, 0, "") for number in seen]


def _whole(answer: str, start: int, end: int) -> bool:
    before = answer[start - 1] if start > 0 else ""
    after = answer[end] if end < len(answer) else ""
    if before.isalnum() or before in _GLUE or after.isalnum() or after in _GLUE:
        return False
    if before == "." and answer[start - 2 : start - 1].isalnum():
        return False  # "x.docs/a.md"
    # A dot after the name ends a sentence, unless a word goes on from it ("a.md.bak").
    return not (after == "." and answer[end + 1 : end + 2].isalnum())
