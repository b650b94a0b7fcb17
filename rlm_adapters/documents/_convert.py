"""One document to text: copied out of its folder, hashed, looked up, else converted behind the walls.

The host reads the document only to copy it (1 MiB at a time, hashing as it goes) into a private folder
that the converter's sandbox gets read-only (`subprocess/oneshot.py`); it never parses it. The converter
(`programs/converter.py`) runs under the document's own limits, and what it sends back is checked
(`_output`) before the text is used. Every way a conversion can fail ends as a reason, never an exception.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.adapter_kit import human_bytes
from rlm_adapters.core.sandbox import CONVERTER_PATH, describe_exit, new_folder
from rlm_adapters.documents._cache import CONVERSIONS, ConversionCache
from rlm_adapters.documents._formats import FORMATS_FOLDER, TEXT, Format, library_paths, over_size, signature_problem
from rlm_adapters.documents._output import BadOutput, Converted, Refusal, one_line, parse_output
from rlm_adapters.documents._store import converter_identity

if TYPE_CHECKING:  # the launcher loads at the first conversion: `rlm-mcp` and `rlm --help` start without it
    from rlm_adapters.core.sandbox import IsolationRequest, OneShotRun, WalledServer

COPY_CHUNK = 1 << 20
TEXT_MODULE = FORMATS_FOLDER / "_text.py"
HEADER_ROOM = 16 * 1024**2  # the answer's header (places) on top of its text
TEXT_MEMORY_SHARE = 5  # a text decoded behind the walls may be this fraction of the converter's memory
# Converters running at once in this process, however many loads run (a server runs several calls): the
# machine's cores, each converter a core and up to its memory limit.
CONVERTER_SLOTS = threading.BoundedSemaphore(os.cpu_count() or 1)
SLOT_POLL_SECONDS = 0.05
NO_SANDBOX = (
    "no sandbox here can hold the document converter (it needs bubblewrap, or unshare with Landlock and "
    "seccomp, as the subprocess sandbox does; `rlm doctor` shows what this machine reaches)"
)


@dataclass(frozen=True)
class DocumentLimits:
    """How far one document's conversion may go; a document past a limit is skipped, naming it.

    Attributes:
        max_document_bytes: Largest document converted (its file's size, checked before it is read).
        seconds: Wall-clock seconds one conversion may take (CPU seconds are capped the same).
        memory_bytes: Memory one conversion may use.
        text_bytes: Largest text one document may give (text decoded behind the walls, compressed or not UTF-8,
            may give up to a fifth of ``memory_bytes`` when that is more: `for_format`).
        max_places: Most pages, slides, sheets and cells one document may have (cells past it are cited
            by sheet).
        expanded_bytes: What an archive-based document (.docx, .xlsx, .epub, ...) or a compressed file
            (.gz, .bz2, .xz) may expand to.
        expansion_ratio: How many times its own size a compressed file may expand to (held against files
            that expand past 1 MiB): a decompression bomb is stopped as it passes this or ``expanded_bytes``.
        parallel: Conversions at once (default: the machine's cores).
        isolation: The converter's sandbox level (``auto``: the strongest that hides the host; an explicit
            weaker level is the caller's choice, as for the REPL).
    """

    max_document_bytes: int = 100 * 1024**2
    seconds: float = 60.0
    memory_bytes: int = 1024**3
    text_bytes: int = 64 * 1024**2
    max_places: int = 200_000
    expanded_bytes: int = 512 * 1024**2
    # The real files seen expand at most 28 times (26,574 .gz files of a Debian system's doc and man pages);
    # gzip's own ceiling is about 1,032, bzip2's and xz's far higher.
    expansion_ratio: int = 200
    parallel: int = field(default_factory=lambda: os.cpu_count() or 1)
    isolation: IsolationRequest = "auto"

    def __post_init__(self) -> None:
        numbers = ("max_document_bytes", "seconds", "memory_bytes", "text_bytes", "max_places", "expanded_bytes")
        for name in (*numbers, "expansion_ratio"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"DocumentLimits.{name} must be a positive number, not {value!r}")
        if not isinstance(self.parallel, int) or self.parallel < 1:
            raise ValueError(f"DocumentLimits.parallel must be a whole number of at least 1, not {self.parallel!r}")
        if self.isolation not in ("auto", "bwrap", "unshare", "process"):
            raise ValueError(
                f"DocumentLimits.isolation must be auto, bwrap, unshare or process, not {self.isolation!r}"
            )

    def for_format(self, fmt: Format) -> DocumentLimits:
        """These limits as a document of `fmt` gets them.

        Text decoded behind the walls (compressed, or not UTF-8) may be as long as a fifth of the converter's
        memory when that is more than ``text_bytes`` and ``max_document_bytes`` (about 200 MiB by default): a
        log is text through and through, and a rotated one gzipped to 10 MB often holds 100; decoding it holds
        its bytes, its ``str`` and its UTF-8 at once, measured at 3 to 4 times its size.
        """
        if fmt.name != TEXT.name:
            return self
        room = self.memory_bytes // TEXT_MEMORY_SHARE
        return dataclasses.replace(
            self, text_bytes=max(self.text_bytes, room), max_document_bytes=max(self.max_document_bytes, room)
        )

    def key(self) -> tuple[Any, ...]:
        """What a cached conversion depends on (the limits that shape its text)."""
        return (
            self.text_bytes,
            self.max_places,
            self.expanded_bytes,
            self.expansion_ratio,
            self.memory_bytes,
            self.isolation,
        )


@dataclass(frozen=True)
class Outcome:
    """One document's conversion: its checked text, or why it was skipped.

    Attributes:
        converted: The text and places, when it was converted.
        reason: Why it was skipped, otherwise.
        raw_size: The document's size in bytes.
        cached: Whether the conversion came from the cache.
    """

    converted: Converted | None
    reason: str | None
    raw_size: int
    cached: bool = False


def convert_fd(
    fd: int,
    fmt: Format,
    limits: DocumentLimits,
    *,
    cache: ConversionCache = CONVERSIONS,
    cancel: threading.Event | None = None,
    seconds: float | None = None,
    servers: ConverterServers | None = None,
) -> Outcome:
    """Convert the document open at `fd` (a regular file; not closed here) as `fmt`.

    Args:
        fd: The document, opened by the caller (the file loader opens it name by name, without symlinks).
        fmt: Its format.
        limits: The conversion's limits.
        cache: Where conversions are kept.
        cancel: Set from another thread to stop (the converter is killed).
        seconds: Less time than ``limits.seconds``, when the caller's own deadline is nearer.
        servers: The batch's converter servers (the libraries imported once, a forked child per document);
            without them a converter process is started for this document alone.
    """
    limits = limits.for_format(fmt)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return Outcome(None, "not a regular file", 0)
    size = info.st_size
    if (problem := over_size(fmt, size, limits.max_document_bytes)) is not None:
        return Outcome(None, problem, size)
    if (problem := signature_problem(fmt, os.pread(fd, 1024, 0))) is not None:
        return Outcome(None, problem, size)
    libraries = library_paths(fmt)
    if isinstance(libraries, str):
        return Outcome(None, libraries, size)
    stat_key = (info.st_dev, info.st_ino, size, info.st_mtime_ns, info.st_ctime_ns)
    digest = cache.digest_of(stat_key)
    if digest is not None and (found := cache.get(conversion_key(digest, fmt, limits))) is not None:
        return _outcome(found, size, cached=True)
    folder = new_folder("document")
    try:
        copy = folder / f"document.{fmt.name}"
        digest = _copy(fd, copy, size)
        cache.remember_digest(stat_key, digest)
        key = conversion_key(digest, fmt, limits)
        if (found := cache.get(key)) is not None:
            return _outcome(found, size, cached=True)
        waited = _take_slot(cancel, seconds)
        if waited is None:
            return Outcome(None, "the call stopped before it was converted", size)
        try:
            left = None if seconds is None else seconds - waited
            result = _run(copy, fmt, libraries, limits, cancel, left, servers)
        finally:
            CONVERTER_SLOTS.release()
        if isinstance(result, Converted | Refusal):
            cache.put(key, result)
            return _outcome(result, size)
        return Outcome(None, result, size)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def conversion_key(digest: str, fmt: Format, limits: DocumentLimits) -> tuple[Any, ...]:
    """What a conversion is kept under: the document's SHA-256, its format, the limits that shape its text and
    the converter's identity (its sources and the format's libraries' versions), so that changing any converts
    again."""
    return (digest, fmt.name, fmt.compression, limits.key(), converter_identity(fmt))


class ConverterServers:
    """The converter servers of one batch: one per thread and format, started at its first document.

    A server (`oneshot.WalledServer` running ``converter.py`` in its ``serve`` mode) raises the walls and
    imports the format's libraries once, then forks a fresh child per document, which caps itself and
    converts it: each document still has a process of its own, without paying an interpreter's start and
    the imports each time. A server lives as long as its batch (`close`), so nothing of one call's
    documents meets another's.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[WalledServer] = []
        self._lock = threading.Lock()

    def server_for(self, fmt: Format, libraries: list[str], limits: DocumentLimits) -> WalledServer:
        """This thread's server for `fmt` under `limits` (made at the first call)."""
        from rlm_adapters.core.sandbox import WalledServer

        mine: dict[tuple[Any, ...], WalledServer] = self._local.__dict__.setdefault("servers", {})
        key = (fmt.module, tuple(libraries), limits.memory_bytes, limits.isolation)
        if (server := mine.get(key)) is None:
            serve = {
                "type": "serve",
                "text": str(TEXT_MODULE),
                "paths": libraries,
                "modules": [str(fmt.module_path)],
                "preload": [*fmt.libraries, *fmt.optional],
            }
            server = WalledServer(
                CONVERTER_PATH,
                serve,
                limits.memory_bytes,
                libraries=[str(FORMATS_FOLDER), *libraries],
                isolation=limits.isolation,
            )
            mine[key] = server
            with self._lock:
                self._all.append(server)
        return server

    @property
    def starts(self) -> int:
        """Servers started so far (a server that met a limit is started again)."""
        with self._lock:
            return sum(server.starts for server in self._all)

    def close(self) -> None:
        """Stop every server (from any thread, once no conversion runs)."""
        with self._lock:
            servers, self._all = self._all, []
        for server in servers:
            server.close()


def _outcome(found: Converted | Refusal, size: int, *, cached: bool = False) -> Outcome:
    if isinstance(found, Refusal):
        return Outcome(None, found.reason, size, cached)
    return Outcome(found, None, size, cached)


def _copy(fd: int, target: Path, size: int) -> str:
    """Copy at most `size` bytes of `fd` into `target` (a private file); the SHA-256 of what was copied."""
    digest = hashlib.sha256()
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
    try:
        offset = 0
        while offset < size:  # a file growing meanwhile is read as it was when it was checked
            chunk = os.pread(fd, min(COPY_CHUNK, size - offset), offset)
            if not chunk:
                break
            digest.update(chunk)
            os.write(out, chunk)
            offset += len(chunk)
    finally:
        os.close(out)
    return digest.hexdigest()


def _take_slot(cancel: threading.Event | None, seconds: float | None) -> float | None:
    """Wait for a converter slot; the seconds waited, or None when the call stopped or ran out of time first."""
    started = time.monotonic()
    while not CONVERTER_SLOTS.acquire(timeout=SLOT_POLL_SECONDS):
        waited = time.monotonic() - started
        if (cancel is not None and cancel.is_set()) or (seconds is not None and waited >= seconds):
            return None
    return time.monotonic() - started


def _run(
    copy: Path,
    fmt: Format,
    libraries: list[str],
    limits: DocumentLimits,
    cancel: threading.Event | None,
    seconds: float | None,
    servers: ConverterServers | None = None,
) -> Converted | Refusal | str:
    """Convert the private `copy` behind the walls (a slot held): the checked answer, or why there is none."""
    wall = limits.seconds if seconds is None else max(min(seconds, limits.seconds), 0.1)
    request = {
        "type": "convert",
        "format": fmt.name,
        "module": str(fmt.module_path),
        "function": fmt.function,
        "text": str(TEXT_MODULE),
        "paths": libraries,
        "compression": fmt.compression,
        "limits": {
            "memory_bytes": limits.memory_bytes,
            "cpu_seconds": wall,
            "text_bytes": limits.text_bytes,
            "places": limits.max_places,
            "expanded_bytes": limits.expanded_bytes,
            "expansion_ratio": limits.expansion_ratio,
        },
    }
    from rlm_adapters.core.sandbox import NoSafeLevel, OneShotLimits, run_walled

    bounds = OneShotLimits(limits.memory_bytes, wall, limits.text_bytes + HEADER_ROOM)
    try:
        if servers is not None:
            run = servers.server_for(fmt, libraries, limits).run(request, copy, bounds, cancel)
        else:
            run = run_walled(
                CONVERTER_PATH,
                request,
                copy,
                bounds,
                libraries=[str(FORMATS_FOLDER), *libraries],
                isolation=limits.isolation,
                cancel=cancel,
            )
    except NoSafeLevel:
        return NO_SANDBOX
    except (RuntimeError, OSError) as exc:
        return f"the converter could not start: {one_line(str(exc))}"
    if run.ending != "exited" or run.returncode != 0:
        return _failure(run, limits, wall)
    try:
        return parse_output(run.output, text_bytes=limits.text_bytes, max_places=limits.max_places)
    except BadOutput as exc:
        return f"the converter's answer was refused ({exc})"


def _failure(run: OneShotRun, limits: DocumentLimits, wall: float) -> str:
    """Why a converter that did not answer normally gave nothing, in terms of the limit it met."""
    if run.ending == "timeout":
        return f"converting it took longer than its time limit of {wall:g} s"
    if run.ending == "output":
        return f"its text is over the cap of {human_bytes(limits.text_bytes)} per document"
    if run.ending == "cancelled":
        return "the call was cancelled while it was converted"
    code = run.returncode
    if code in (-9, 137):
        return f"converting it needed more than its memory limit of {human_bytes(limits.memory_bytes)}"
    if code in (-24, 152):
        return f"converting it used more than its CPU time limit of {wall:g} s"
    if code == 3:
        return f"the converter could not raise its sandbox walls ({one_line(run.stderr.strip()[-300:])})"
    last = one_line((run.stderr.strip().splitlines() or [""])[-1], 200)
    return f"the converter {describe_exit(code)}" + (f": {last}" if last else "")
