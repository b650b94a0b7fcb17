"""One context file per distinct context, shared read-only by every sandbox worker that runs over it.

N runs over one 200 MB context used to write N files and hold N copies (issue 41). The store writes a
context once, named by its content (``<sha256>.txt`` or ``.json`` in a private folder, 0700, of this process),
and hands out leases; each worker's context folder gets a hard link to that one file (`process.place_context`),
so every worker maps the same page-cache pages. The file is never written again after it is named, and only
sandboxes whose walls make their context folder read-only (a read-only bind mount, or Landlock with truncation
handled) take a lease (`subprocess/sandbox.py`): no run can change what another reads. The last lease's
release removes the file; the workers' own links keep it alive for as long as they map it.

The same ``str`` object is never hashed twice while it is leased (it is immutable, and held, so its id stays
its own); an equal context in another object is written, hashed and then joined to the file already there.
Lists and dicts are mutable, so each lease of one writes it afresh (and joins by content).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from rlm_adapters.core.context import WRITE_SLICE, RunContext
from rlm_adapters.core.sandbox.base import INLINE_WRITE_CHARS  # written in the event loop up to this size
from rlm_adapters.core.sandbox.tempdirs import new_folder
from rlm_adapters.errors import SandboxError

FOLDER_KIND = "contexts"  # rlm-contexts-<pid>-..., in the user's private folder (`tempdirs`)
SUFFIXES = {"text": ".txt", "json": ".json"}


# Plain classes, not dataclasses: compiling a dataclass's methods is import time every first call pays.
class _File:
    __slots__ = ("key", "path", "users")

    def __init__(self, key: tuple[str, str], path: Path) -> None:
        self.key = key  # (format, sha256 of the bytes)
        self.path = path
        self.users = 1


class _Write:
    """One write of a context in progress or done; the leases that wait for it or hold its file."""

    __slots__ = ("done", "users", "value")

    def __init__(self, value: str | None) -> None:
        self.value = value  # held, so that `id(value)` names this object for as long as the entry lives
        self.done: concurrent.futures.Future[_File] = concurrent.futures.Future()
        self.done.set_running_or_notify_cancel()  # no waiter's cancellation cancels it for the others
        self.users = 1


class ContextLease:
    """A hold on one shared context file: its path, until `release`.

    Attributes:
        path: The file (host path), read-only; hard-link it, never write it.
    """

    __slots__ = ("_released", "_store", "_write", "path")

    def __init__(self, path: Path, store: ContextStore, write: _Write) -> None:
        self.path = path
        self._store = store
        self._write = write
        self._released = False

    def release(self) -> None:
        """Give the hold back (idempotent); the last one removes the file from the store's folder."""
        if not self._released:
            self._released = True
            self._store._release(self._write)


def _pieces(context: RunContext) -> Iterator[bytes]:
    """The file's bytes, in pieces: the same as `core.context.write_context_file` writes."""
    value = context.value
    if isinstance(value, str):
        for start in range(0, len(value), WRITE_SLICE):
            yield value[start : start + WRITE_SLICE].encode("utf-8", "surrogatepass")
        return
    for chunk in json.JSONEncoder(ensure_ascii=False).iterencode(value):
        yield chunk.encode("utf-8")


class ContextStore:
    """The process's shared context files, one per distinct content (see the module's text)."""

    def __init__(self) -> None:
        self._hooked = False
        self._forget()

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._folder: Path | None = None
        self._owner = os.getpid()
        self._by_object: dict[int, _Write] = {}
        self._by_content: dict[tuple[str, str], _File] = {}
        self.files_written = 0  # files named into the store (a write joined to an equal one is not counted)

    async def acquire(self, context: RunContext) -> ContextLease:
        """The shared file holding `context`, written now unless a live lease already holds it.

        Raises:
            SandboxError: The file cannot be written (a full disk, say).
        """
        value = context.value if isinstance(context.value, str) else None
        with self._lock:
            write = self._by_object.get(id(value)) if value is not None else None
            if write is not None and write.value is value:
                write.users += 1
                fresh = False
            else:
                write = _Write(value)
                if value is not None:
                    self._by_object[id(value)] = write
                fresh = True
        try:
            if fresh:
                if context.size <= INLINE_WRITE_CHARS:
                    self._fill(context, write)
                else:
                    # Not awaited directly: a cancelled run must not stop a write others wait for.
                    asyncio.get_running_loop().run_in_executor(None, self._fill, context, write)
            file = await asyncio.wrap_future(write.done)
        except BaseException:
            self._release(write)
            raise
        return ContextLease(file.path, self, write)

    def _fill(self, context: RunContext, write: _Write) -> None:
        try:
            file = self._write_file(context)
        except BaseException as exc:
            with self._lock:
                if write.value is not None and self._by_object.get(id(write.value)) is write:
                    del self._by_object[id(write.value)]  # the next lease tries again
            error = exc
            if isinstance(exc, OSError):
                error = SandboxError(f"cannot write the shared context file: {exc}")
            write.done.set_exception(error)
        else:
            write.done.set_result(file)

    def _write_file(self, context: RunContext) -> _File:
        folder = self._ensure_folder()
        suffix = SUFFIXES[context.format]
        fd, name = tempfile.mkstemp(dir=folder, prefix=".writing-", suffix=suffix)
        temporary = Path(name)
        try:
            digest = hashlib.sha256()
            with open(fd, "wb") as out:
                for piece in _pieces(context):
                    digest.update(piece)
                    out.write(piece)
            os.chmod(temporary, 0o444)
            key = (context.format, digest.hexdigest())
            with self._lock:
                file = self._by_content.get(key)
                if file is not None:
                    file.users += 1
                else:
                    path = folder / f"{key[1]}{suffix}"
                    os.rename(temporary, path)  # in our own 0700 folder: no other name can be there
                    file = self._by_content[key] = _File(key, path)
                    self.files_written += 1
                    return file
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        temporary.unlink()  # an equal context's file is already there
        return file

    def _ensure_folder(self) -> Path:
        with self._lock:
            if self._folder is None:
                self._folder = new_folder(FOLDER_KIND)
                if not self._hooked:
                    self._hooked = True
                    atexit.register(self._remove_folder)
                    if hasattr(os, "register_at_fork"):
                        # A forked child starts its own folder; the parent's files are the parent's.
                        os.register_at_fork(after_in_child=self._forget)
            return self._folder

    def _release(self, write: _Write) -> None:
        with self._lock:
            write.users -= 1
            if write.users:
                return
            if write.value is not None and self._by_object.get(id(write.value)) is write:
                del self._by_object[id(write.value)]
        write.done.add_done_callback(self._release_file)  # at once if the write is done

    def _release_file(self, done: concurrent.futures.Future[_File]) -> None:
        if done.exception() is not None:
            return
        file = done.result()
        with self._lock:
            file.users -= 1
            if file.users or self._by_content.get(file.key) is not file:
                return
            del self._by_content[file.key]
        with contextlib.suppress(OSError):
            file.path.unlink()  # the workers' hard links keep what they map

    def files(self) -> list[Path]:
        """The context files the store holds now (for tests and benchmarks)."""
        with self._lock:
            return [file.path for file in self._by_content.values()]

    def _remove_folder(self) -> None:
        with self._lock:
            folder, self._folder = self._folder, None
            self._by_object.clear()
            self._by_content.clear()
        if folder is not None and os.getpid() == self._owner:
            shutil.rmtree(folder, ignore_errors=True)

    def reset(self) -> None:
        """Forget every entry and remove the folder (for tests: no run may hold a lease)."""
        self._remove_folder()
        self.files_written = 0


CONTEXTS = ContextStore()
