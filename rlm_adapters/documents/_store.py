"""Conversions kept on disk, by content hash, private to the user: a second question over a folder starts at once.

Where: the folder ``RLM_DOCUMENT_CACHE`` names (``off`` keeps nothing on disk), else
``$XDG_CACHE_HOME/rlm-adapters/documents`` (``~/.cache/rlm-adapters/documents``). How big: at most
``RLM_DOCUMENT_CACHE_SIZE`` bytes (default 1 GiB; ``512MiB``, ``4G``), least recently used out first.

A kept conversion is text that reaches a model as if it were the document, so the folder is trusted as the call
cache is: it must be a real folder (no symbolic link), this user's, writable by nobody else, and either empty
(it is then made ours) or marked by our ``CACHEDIR.TAG`` (which also tells backup tools to skip it); anything
else is refused with a `DocumentCacheError` and left as it is. Each entry is opened without following links
from the folder's own descriptor and refused unless it is this user's and writable by nobody else. An entry
carries its key's digest and is the converter's own answer (frame header and text), read back through the same
checks as a fresh answer (`_output.parse_output`), so an entry that is damaged, cut short or renamed is a miss
(and removed), never text for the model. Only names of this store's own pattern are ever removed: pointing
``RLM_DOCUMENT_CACHE`` at another folder refuses it instead of emptying it.

The key is the document's SHA-256, its format, the limits that shape its text and `converter_identity` (the
converter program's and format modules' sources, the format libraries' versions), so editing a file, a limit,
the converter or a library converts afresh. Writes go to a private temporary file renamed into place, so
processes sharing the folder (``rlm ask``, ``rlm-mcp``, notebooks) never read half an entry; a store that
cannot be written (a full disk) is logged once and never fails a load.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import re
import secrets
import stat
import struct
import threading
import time
from collections.abc import Hashable, Mapping
from pathlib import Path

from rlm_adapters.core.adapter_kit import parse_size
from rlm_adapters.core.sandbox import CONVERTER_PATH
from rlm_adapters.documents._formats import FORMATS_FOLDER, Format
from rlm_adapters.documents._output import BadOutput, Converted, Refusal, parse_output
from rlm_adapters.errors import ConfigurationError, DocumentCacheError

logger = logging.getLogger("rlm_adapters.documents")

ENV_FOLDER = "RLM_DOCUMENT_CACHE"
ENV_SIZE = "RLM_DOCUMENT_CACHE_SIZE"
OFF_WORDS = frozenset({"off", "0", "no", "false", "none"})
DEFAULT_MAX_BYTES = 1 << 30
STORE_VERSION = 2  # raise when what an entry holds, or how it is read, changes (2: a PDF's page labels)
TAG_NAME = "CACHEDIR.TAG"
TAG_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"  # https://bford.info/cachedir/
TAG = TAG_SIGNATURE + b"\n# rlm-adapters: converted documents (rlm_adapters.documents); safe to delete.\n"
MAGIC = b"RLMDOC1\n"
ENTRY_NAME = re.compile(r"[0-9a-f]{64}\.conv")
TEMP_NAME = re.compile(r"\.[0-9a-f]{64}\.[0-9]+\.[0-9a-f]{8}\.tmp")
STALE_TEMP_SECONDS = 3600.0  # a temporary file this old was left by a killed process
EVICT_TO = 0.9  # an eviction frees down to this share of the cap, so the next few writes do not scan again
READ_MAX_PLACES = 10_000_000  # an entry's places are bounded by its own size; this only keeps the parser's cap
_FRAME = struct.Struct(">I")
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class ConversionStore:
    """A folder of conversions, checked before anything in it is read.

    Args:
        folder: The folder (created ``0700`` when missing, with its parents).
        max_bytes: How big the entries together may grow; past it the least recently used are removed.

    Raises:
        DocumentCacheError: The folder is not this user's own, can be written by others, is a link, or holds
            other files than a store's.
    """

    def __init__(self, folder: str | os.PathLike[str], max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
            raise ValueError(f"max_bytes must be a positive number of bytes, not {max_bytes!r}")
        self.folder = Path(os.path.abspath(os.fspath(folder)))
        self.max_bytes = max_bytes
        self._fd = _open_folder(self.folder)
        self._lock = threading.Lock()
        self._bytes: int | None = None  # what the entries hold, scanned at the first write
        self._warned = False
        self.reads = 0
        self.writes = 0

    def get(self, key: Hashable) -> Converted | Refusal | None:
        """The conversion kept under `key` (now the most recently used), or None.

        Raises:
            DocumentCacheError: The entry is a link, another user's, or writable by others.
        """
        name = entry_name(key)
        try:
            fd = os.open(name, _OPEN_FLAGS, dir_fd=self._fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symbolic link
                raise DocumentCacheError(str(self.folder / name), "is a symbolic link, which no store writes") from None
            return None
        try:
            info = os.fstat(fd)
            _check_entry(self.folder / name, info)
            if info.st_size > self.max_bytes + len(MAGIC) + 65:
                data = b""
            else:
                data = _read_all(fd, info.st_size)
                os.utime(fd)  # the last use, which eviction goes by
        finally:
            os.close(fd)
        value = _decode(data, name)
        if value is None:
            self._remove(name)
            return None
        self.reads += 1
        return value

    def put(self, key: Hashable, value: Converted | Refusal) -> None:
        """Keep `value` under `key`; an entry larger than the cap is not kept, and a failed write is only logged."""
        name = entry_name(key)
        pieces = _encode(name, value)
        size = sum(len(piece) for piece in pieces)
        if size > self.max_bytes:
            return
        temporary = f".{name.removesuffix('.conv')}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=self._fd)  # fmt: skip
            try:
                for piece in pieces:
                    view = memoryview(piece)
                    while view:
                        view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(temporary, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except OSError as exc:
            self._remove(temporary)
            if not self._warned:
                self._warned = True
                logger.warning("the document cache %s cannot be written (%s); conversions are not kept",
                               self.folder, exc.strerror or exc)  # fmt: skip
            return
        self.writes += 1
        self._account(size)

    def entries(self) -> int:
        """How many conversions the folder holds."""
        return sum(1 for name in os.listdir(self._fd) if ENTRY_NAME.fullmatch(name))

    def size(self) -> int:
        """The bytes its entries hold."""
        return sum(size for _, size, _ in self._scan())

    def close(self) -> None:
        """Let the folder go (its descriptor); the entries stay on disk."""
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def _account(self, added: int) -> None:
        with self._lock:
            self._bytes = sum(size for _, size, _ in self._scan()) if self._bytes is None else self._bytes + added
            if self._bytes > self.max_bytes:
                self._bytes = self._evict()

    def _scan(self) -> list[tuple[float, int, str]]:
        """``(last use, size, name)`` of each entry; stale temporary files of killed processes are removed."""
        found: list[tuple[float, int, str]] = []
        now = time.time()
        with os.scandir(self._fd) as listing:
            for item in listing:
                try:
                    info = item.stat(follow_symlinks=False)
                except OSError:
                    continue
                if ENTRY_NAME.fullmatch(item.name) and stat.S_ISREG(info.st_mode):
                    found.append((info.st_mtime, info.st_size, item.name))
                elif TEMP_NAME.fullmatch(item.name) and now - info.st_mtime > STALE_TEMP_SECONDS:
                    self._remove(item.name)
        return found

    def _evict(self) -> int:
        """Remove the least recently used entries until they hold at most `EVICT_TO` of the cap; what is left."""
        entries = sorted(self._scan())
        total = sum(size for _, size, _ in entries)
        for _, size, name in entries:
            if total <= self.max_bytes * EVICT_TO:
                break
            self._remove(name)
            total -= size
        return total

    def _remove(self, name: str) -> None:
        with contextlib.suppress(OSError):  # another process removed it first, or it is already gone
            os.unlink(name, dir_fd=self._fd)


def entry_name(key: Hashable) -> str:
    """The file name of `key`'s entry: the SHA-256 of its ``repr`` (keys are tuples of strings and numbers)."""
    return hashlib.sha256(repr((STORE_VERSION, key)).encode("utf-8")).hexdigest() + ".conv"


@functools.cache
def converter_identity(fmt: Format) -> str:
    """What, besides a document's bytes and limits, decides its text: the converter program's and the format
    modules' sources and the format libraries' versions (a digest; read once per process and format)."""
    digest = hashlib.sha256(f"{STORE_VERSION}:{fmt.name}:{fmt.module}:{fmt.function}".encode())
    programs = sorted(CONVERTER_PATH.parent.glob("convert*.py"))
    for path in [*programs, *sorted(FORMATS_FOLDER.rglob("*.py"))]:
        digest.update(path.name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    for distribution in fmt.distributions:
        try:
            version = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"{distribution}={version}\0".encode())
    return digest.hexdigest()


def default_folder(env: Mapping[str, str]) -> Path:
    """``$XDG_CACHE_HOME/rlm-adapters/documents``, or ``~/.cache/...`` (a relative XDG_CACHE_HOME is ignored)."""
    base = env.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".cache"
    return root / "rlm-adapters" / "documents"


def store_settings(env: Mapping[str, str]) -> tuple[Path, int] | None:
    """The folder and cap the environment asks for, or None for ``RLM_DOCUMENT_CACHE=off``.

    Raises:
        ConfigurationError: ``RLM_DOCUMENT_CACHE_SIZE`` is not a positive size.
    """
    where = env.get(ENV_FOLDER, "").strip()
    if where.lower() in OFF_WORDS:
        return None
    folder = Path(where).expanduser() if where else default_folder(env)
    raw = env.get(ENV_SIZE, "").strip()
    try:
        size = parse_size(raw) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        size = None
    if size is None or size <= 0:
        raise ConfigurationError(f"{ENV_SIZE}={raw!r} is not a size: use bytes or a string like '2GiB'")
    return folder, size


def _open_folder(folder: Path) -> int:
    """The folder's descriptor, once it is known to be a store of this user's that nobody else can write."""
    path = str(folder)
    created = False
    try:
        os.lstat(folder)
    except FileNotFoundError:
        try:
            os.makedirs(folder.parent, mode=0o700, exist_ok=True)
            os.mkdir(folder, 0o700)
            created = True
        except FileExistsError:
            pass  # another process made it meanwhile: checked below like any folder
        except OSError as exc:
            raise DocumentCacheError(path, f"cannot be created ({exc.strerror})") from None
    except OSError as exc:
        raise DocumentCacheError(path, f"cannot be read ({exc.strerror})") from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(folder):
            raise DocumentCacheError(
                path, f"is a symbolic link (to {os.readlink(folder)!r}); name the folder itself"
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise DocumentCacheError(path, "is not a folder") from None
        raise DocumentCacheError(path, f"cannot be opened ({exc.strerror})") from None
    try:
        _check_folder(path, fd, created)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_folder(path: str, fd: int, created: bool) -> None:
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        raise DocumentCacheError(path, f"belongs to another user (uid {info.st_uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise DocumentCacheError(
            path,
            f"can be written by other users (mode {stat.S_IMODE(info.st_mode):o}), who could plant text a model "
            "would read as your documents; chmod 700 it if you trust what it holds",
        )
    names = os.listdir(fd)
    if TAG_NAME in names:
        _check_tag(path, fd)
    elif names:
        raise DocumentCacheError(
            path, "holds other files and no CACHEDIR.TAG of rlm-adapters: it is not a document cache"
        )
    else:
        tag = os.open(TAG_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            os.write(tag, TAG)
        finally:
            os.close(tag)
    if info.st_mode & 0o077:
        if created or not names:
            os.chmod(fd, 0o700)  # a folder we made or found empty holds only what we put there: private
        else:
            logger.warning(
                "the document cache %s can be read by other users (mode %o): it holds your documents' text; "
                "chmod 700 it unless it is shared on purpose",
                path,
                stat.S_IMODE(info.st_mode),
            )


def _check_tag(path: str, fd: int) -> None:
    try:
        tag = os.open(TAG_NAME, _OPEN_FLAGS, dir_fd=fd)
    except OSError:
        raise DocumentCacheError(path, f"cannot be used: its {TAG_NAME} is a link or cannot be read") from None
    try:
        info = os.fstat(tag)
        _check_entry(Path(path) / TAG_NAME, info)
        head = os.read(tag, len(TAG))
    finally:
        os.close(tag)
    if not head.startswith(TAG_SIGNATURE) or b"rlm-adapters" not in head:
        raise DocumentCacheError(path, f"holds another program's {TAG_NAME}: it is not rlm-adapters' document cache")


def _check_entry(path: Path, info: os.stat_result) -> None:
    """Refuse a file of the store that someone else wrote or can write: its text would reach a model."""
    if not stat.S_ISREG(info.st_mode):
        raise DocumentCacheError(str(path), "is not a regular file, which no store writes")
    if info.st_uid != os.geteuid():
        raise DocumentCacheError(str(path), f"belongs to another user (uid {info.st_uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise DocumentCacheError(
            str(path), f"can be written by other users (mode {stat.S_IMODE(info.st_mode):o}); remove it"
        )


def _read_all(fd: int, size: int) -> bytes:
    pieces: list[bytes] = []
    left = size
    while left > 0:
        piece = os.read(fd, min(left, 1 << 24))
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def _encode(name: str, value: Converted | Refusal) -> list[bytes]:
    """An entry: the magic line, the name it belongs under, and the converter's own answer for `value`."""
    if isinstance(value, Refusal):
        header: dict[str, object] = {"type": "document", "ok": False, "reason": value.reason}
        body = b""
    else:
        body = value.text.encode("utf-8")
        header = {
            "type": "document",
            "ok": True,
            "text_bytes": len(body),
            "places": [list(place) for place in value.places],
            "notes": list(value.notes),
        }
        if value.page_labels:
            header["page_labels"] = [[number, label] for number, label in sorted(value.page_labels.items())]
    encoded = json.dumps(header, ensure_ascii=False).encode("utf-8")
    return [MAGIC + name.encode("ascii") + b"\n", _FRAME.pack(len(encoded)), encoded, body]


def _decode(data: bytes, name: str) -> Converted | Refusal | None:
    """The conversion in an entry read as `name`, checked as a converter's answer is; None when it is not one."""
    head = MAGIC + name.encode("ascii") + b"\n"
    if not data.startswith(head):
        return None
    frame = data[len(head) :]
    try:
        return parse_output(frame, text_bytes=len(frame), max_places=READ_MAX_PLACES)
    except BadOutput:
        return None
