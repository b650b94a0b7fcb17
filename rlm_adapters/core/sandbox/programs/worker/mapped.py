"""An ASCII context as a ``str`` whose characters are the context file's own page-cache pages (issue 41).

N workers over one context map the one file the host shares (`core/sandbox/context_store.py`), so its text
costs the machine once, not once per run. CPython keeps a compact ASCII ``str`` as a fixed header followed
by its characters and a NUL; here the header sits at the end of one private anonymous page and the file is
mapped (``MAP_PRIVATE``, read-only) right after it, with a zero byte past its end. The header is a copy of a
real string's, so only its length, hash and reference count are written by us, at offsets checked first on
two probe strings. The object is never freed: its reference count starts too high to reach zero, so
CPython never hands its memory to the allocator, and never resizes it in place.

`mapped_text` returns None wherever any of this is not known to hold (another interpreter, a free-threaded
build, a layout that does not match, a file that is not ASCII or that this process could write): the
worker then decodes the file into a private ``str`` as before. The mapping is private and read-only: code in
one sandbox that makes its pages writable and changes them changes its own copy only.
"""

from __future__ import annotations

import os
import struct
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Interpreters this was read and tested on (3.11 adds a NULL ``wstr`` after the state); others decode.
KNOWN_VERSIONS = ((3, 11), (3, 12), (3, 13))
MACHINES = ("x86_64", "aarch64")  # where MAP_FIXED is 0x10
MAP_FIXED = 0x10
REFCOUNT = 1 << 60  # never reaches zero: the object is never deallocated, nor resized in place
CHECK_PIECE = 4 << 20
_HEAD = "=qQqq"  # ob_refcnt, ob_type, length, hash: the header's first 32 bytes
STATE = struct.calcsize(_HEAD)

_PINNED: list[str] = []  # the strings made here, held for the life of the process


def str_layout() -> tuple[int, bytes] | None:
    """The header size and a header template of a compact ASCII ``str`` here, or None where not known."""
    if (
        sys.implementation.name != "cpython"
        or sys.version_info[:2] not in KNOWN_VERSIONS
        or "t" in getattr(sys, "abiflags", "")
        or struct.calcsize("P") != 8
        or sys.byteorder != "little"
        or not sys.platform.startswith("linux")
        or os.uname().machine not in MACHINES
    ):
        return None
    try:
        import ctypes
    except ImportError:  # an interpreter built without libffi
        return None

    pid = str(os.getpid())
    probes = ["".join(["rlm-probe-", pid]), "".join(["rlm-probe-longer-", pid])]
    size = sys.getsizeof(probes[0]) - len(probes[0]) - 1
    headers = []
    for probe in probes:
        if sys.getsizeof(probe) - len(probe) - 1 != size or not STATE + 8 <= size <= 64:
            return None
        expected = hash(probe)  # computed, so the header holds it
        header = ctypes.string_at(id(probe), size)
        _, kind, length, cached = struct.unpack_from(_HEAD, header)
        if kind != id(str) or length != len(probe) or cached != expected:
            return None
        if ctypes.string_at(id(probe) + size, len(probe) + 1) != probe.encode("ascii") + b"\0":
            return None
        headers.append(header)
    # The state's low byte holds its bits (interned:2, kind:3, compact:1, ascii:1, then 3.11's ready or
    # later versions' statically_allocated); the rest of its word is padding, as are the next 4 bytes; then
    # (3.11 only) ``wstr``, NULL until asked for.
    state = headers[0][STATE]
    if state != headers[1][STATE] or state & 0x7F != 0x64 or any(h[STATE + 8 :].strip(b"\0") for h in headers):
        return None  # not a compact ASCII (kind 1) string that is not interned, or something follows it
    template = bytearray(size)
    struct.pack_into(_HEAD, template, 0, REFCOUNT, id(str), 0, -1)  # length set per string; no hash yet
    template[STATE] = state
    return size, bytes(template)


def mapped_text(path: str) -> str | None:
    """The file's text as a ``str`` over a private read-only mapping of it, or None (decode it instead)."""
    try:
        writable = os.open(path, os.O_RDWR)
    except OSError:
        pass  # what the walls should say: this process cannot change the file under the mapping
    else:
        os.close(writable)
        return None
    layout = str_layout()
    if layout is None:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return _build(fd, size, *layout) if size else None
    finally:
        os.close(fd)


def _build(fd: int, size: int, header_size: int, template: bytes) -> str | None:
    import ctypes
    import mmap  # here: the host imports this module too (the worker package's face), and never maps

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    failed = ctypes.c_void_p(-1).value
    page = mmap.PAGESIZE
    span = page + (size // page + 1) * page  # the header's page, the text, and at least one zero byte after it
    private = mmap.MAP_PRIVATE
    base = libc.mmap(None, span, mmap.PROT_READ | mmap.PROT_WRITE, private | mmap.MAP_ANONYMOUS, -1, 0)
    if base is None or base == failed:
        return None
    text = base + page
    if libc.mmap(text, size, mmap.PROT_READ, private | MAP_FIXED, fd, 0) != text or not _ascii(ctypes, text, size):
        libc.munmap(base, span)
        return None
    header = bytearray(template)
    struct.pack_into("=q", header, 16, size)
    ctypes.memmove(text - header_size, bytes(header), header_size)
    value: str = ctypes.cast(text - header_size, ctypes.py_object).value
    _PINNED.append(value)
    return value


def _ascii(ctypes: Any, address: int, size: int) -> bool:
    """Whether every byte is ASCII (a compact ASCII ``str`` must hold nothing else)."""
    return all(
        ctypes.string_at(address + start, min(CHECK_PIECE, size - start)).isascii()
        for start in range(0, size, CHECK_PIECE)
    )
