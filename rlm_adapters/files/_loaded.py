"""What a load returns: the files read (as text, or converted from a document), the ones skipped, and why."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoadedFile:
    """One file read as text.

    Attributes:
        path: Its name, as results show it.
        text: Its text (for a document, the converted text).
        size: Bytes of that text (what counts toward the load's cap).
        invalid_utf8: It was not valid UTF-8: it was decoded behind the sandbox's walls, in the encoding its
            ``metadata["notes"]`` name (or as UTF-8 with its damaged bytes replaced, when it was mostly UTF-8).
        metadata: For a converted document: its ``format``, ``raw_size`` and places (``pages``, ``slides``,
            ``sheets``, ``cells``, ``places``; see `rlm_adapters.documents.document_metadata`); else empty.
    """

    path: str
    text: str
    size: int
    invalid_utf8: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def format(self) -> str | None:
        """The document format it was converted from (``pdf``; ``text`` for text decoded behind the walls: not
        UTF-8, or compressed), or None for a UTF-8 text file."""
        value = self.metadata.get("format")
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class SkippedFile:
    """A file that was found but not read, and why."""

    path: str
    reason: str


@dataclass
class LoadResult:
    """What `load_paths` read and skipped."""

    files: list[LoadedFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """Bytes of the files read (converted documents by their text)."""
        return sum(f.size for f in self.files)

    def documents(self) -> list[dict[str, Any]]:
        """The files as RLM documents: ``{"id", "text", "metadata"}`` (a document's metadata keeps its places)."""
        return [
            {
                "id": f.path,
                "text": f.text,
                "metadata": {"path": f.path, "size": f.size, "invalid_utf8": f.invalid_utf8, **f.metadata},
            }
            for f in self.files
        ]

    def empty(self, spelled: Sequence[str]) -> str | None:
        """What is empty when no file read holds text, in words every interface can end with its own advice
        (``: give --context ...``, ``: give `paths` ...``); None when a file holds text.

        A run over nothing would still spend a model call to find that out, so every front end refuses it.

        Args:
            spelled: The paths and globs as the caller gave them.
        """
        if any(f.text and not f.text.isspace() for f in self.files):  # `isspace`: `strip` would copy the text
            return None
        if len(self.files) == 1:
            text = self.files[0].text
            what = "is empty" if not text else "holds only whitespace"
            return f"the file {self.files[0].path!r} {what}"
        return f"every file in {list(spelled)!r} is empty ({len(self.files)} files)"
