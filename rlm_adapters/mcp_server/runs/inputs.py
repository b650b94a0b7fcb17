"""What one `rlm_query` call reads: its globs checked under the roots, its files loaded in a thread within
the call's timeout, and the run's context built from them and the inline text."""

from __future__ import annotations

import contextlib
import glob
import os
import threading
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio

from rlm_adapters.documents import ConversionProgress, binary_kind
from rlm_adapters.errors import QueryError
from rlm_adapters.files import LoadResult, check_glob, load_paths

# The caps are the server's: its operator raises them, so errors name its flag (the client narrows the paths).
SERVER_CAP_NAMES = {"max_bytes": "rlm-mcp --max-bytes", "max_files": "the server's cap on files"}
# How long past the call's timeout a file load may run before the call gives up on its thread.
LOAD_GRACE_SECONDS = 1.0
# File loads running at once per server: more wait (within their timeout), so loads never use up the threads.
MAX_CONCURRENT_LOADS = 4


def build_context(loaded: LoadResult | None, text: str | None) -> Any:
    """The run's context: the files as documents, plus inline text; or the text alone."""
    if loaded is None:
        return text
    documents = loaded.documents()
    if text:
        documents.append({"id": "text", "text": text, "metadata": {"source": "inline text"}})
    return documents


def check_globs(paths: Sequence[str], roots: Sequence[Path]) -> None:
    """Refuse globs that could match outside the roots, before anything is expanded or a model is asked.

    A glob's literal leading folder must lie under a root, and no part of it may be ``..``; the message
    names only the glob as it was spelled (see `rlm_adapters.files.check_glob`).
    """
    allowed = [os.path.realpath(root) for root in roots]
    for raw in paths:
        expanded = os.path.expanduser(raw)
        if glob.has_magic(expanded):
            check_glob(raw, os.path.join(allowed[0], expanded), allowed)


async def load_inputs(
    paths: Sequence[str] | None,
    text: str | None,
    roots: Sequence[Path],
    max_bytes: int,
    *,
    timeout: float | None = None,
    limiter: anyio.CapacityLimiter | None = None,
    on_converting: Callable[[str], Coroutine[Any, Any, None]] | None = None,
) -> LoadResult | None:
    """Read `paths` under `roots` in a worker thread, within `timeout` and the caller's cancellation.

    The thread is one of `limiter`'s (not the event loop's default executor, which building a model
    client uses), and it stops itself at the next entry once the call is cancelled or out of time.
    `on_converting` hears ``converting 3/40 PDFs`` on the event loop while documents are converted.
    """
    if not paths and not text:
        raise QueryError("give `paths` (files, folders or globs) or `text` (inline context), or both")
    if text is not None and text.isspace():
        raise QueryError(f"`text` holds only whitespace ({len(text)} characters): give the text to reason over")
    if text and (kind := binary_kind(text)) is not None:
        raise QueryError(
            f"`text` is the raw bytes of {kind} ({text[:10]!r}...), not text: give the file in `paths`, "
            "which converts documents to text behind the sandbox's walls"
        )
    if not paths:
        return None
    check_globs(paths, roots)
    cancel = threading.Event()
    progress = None if on_converting is None else partial(_from_thread, on_converting)
    work = partial(
        load_paths,
        list(paths),
        list(roots),
        max_bytes=max_bytes,
        timeout=timeout,
        cancel=cancel,
        progress=progress,
        cap_names=SERVER_CAP_NAMES,
    )
    try:
        # The thread checks the same deadline; this outer one also covers a read stuck in the file system.
        with anyio.fail_after(None if timeout is None else timeout + LOAD_GRACE_SECONDS):
            loaded = await anyio.to_thread.run_sync(work, abandon_on_cancel=True, limiter=limiter)
    except TimeoutError:
        raise QueryError(
            f"reading the paths took longer than the call's timeout ({timeout:g} s); narrow the paths"
        ) from None
    finally:
        cancel.set()
    empty = None if text else loaded.empty(paths)
    if empty is not None:  # as `rlm ask` refuses it: a run over nothing would still spend a model call
        raise QueryError(f"{empty}: give `paths` a file with text in it, or `text`")
    return loaded


def _from_thread(on_converting: Callable[[str], Coroutine[Any, Any, None]], progress: ConversionProgress) -> None:
    """Hand the loading thread's conversion count to the event loop (and wait for it: one notification each)."""
    with contextlib.suppress(RuntimeError):  # the call is gone (its thread abandoned): nobody to tell
        anyio.from_thread.run(on_converting, progress.text())
