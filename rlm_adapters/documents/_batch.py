"""Many documents converted at once (up to the machine's cores), in order, with progress and a byte cap.

The caller (the file loader) hands `DocumentJob`s that open their own file; this module runs them in a
thread pool (each thread drives a sandboxed converter server, which forks a child per document), reports
``converting 12/40 PDFs`` after each, and
stops early, killing the converters still running, when the caller's stop condition holds (a deadline, a
cancellation) or the converted texts pass the byte cap.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlm_adapters.documents._cache import CONVERSIONS, ConversionCache
from rlm_adapters.documents._convert import ConverterServers, DocumentLimits, Outcome, convert_fd
from rlm_adapters.documents._formats import Format

POLL_SECONDS = 0.1


@dataclass(frozen=True)
class DocumentJob:
    """One document to convert.

    Attributes:
        path: Its name as results show it.
        format: Its format.
        open: Opens it (a fresh read-only descriptor of a regular file, closed after the conversion);
            raises `OSError` when it cannot.
    """

    path: str
    format: Format
    open: Callable[[], int]


@dataclass(frozen=True)
class ConversionProgress:
    """How far a batch of conversions is.

    Attributes:
        done: Documents finished (converted, taken from the cache or skipped).
        total: Documents in the batch.
        label: What they are (``PDFs``, or ``documents`` for a mix).
        cached: How many of those done came from the conversion cache (no converter ran for them).
    """

    done: int
    total: int
    label: str
    cached: int = 0

    def text(self) -> str:
        """``converting 12/40 PDFs``, and ``(9 from the cache)`` when some were kept from an earlier call."""
        kept = f" ({self.cached} from the cache)" if self.cached else ""
        return f"converting {self.done}/{self.total} {self.label}{kept}"


@dataclass
class Batch:
    """What `convert_all` did: one outcome per job (None for one never finished), and why it stopped."""

    outcomes: list[Outcome | None] = field(default_factory=list)
    over_cap: bool = False
    stopped: bool = False

    @property
    def converted_bytes(self) -> int:
        """Bytes of the converted texts."""
        return sum(o.converted.size for o in self.outcomes if o is not None and o.converted is not None)


def label_of(jobs: Sequence[DocumentJob]) -> str:
    """What progress calls a batch: the formats' plural when they share one, else ``documents``."""
    labels = {job.format.plural for job in jobs}
    return labels.pop() if len(labels) == 1 else "documents"


def convert_all(
    jobs: Sequence[DocumentJob],
    limits: DocumentLimits,
    *,
    progress: Callable[[ConversionProgress], None] | None = None,
    stop: Callable[[], bool] | None = None,
    deadline: float | None = None,
    max_bytes: int | None = None,
    cache: ConversionCache = CONVERSIONS,
) -> Batch:
    """Convert `jobs`, `limits.parallel` at a time; the outcomes in the jobs' order.

    Args:
        jobs: The documents.
        limits: Each conversion's limits.
        progress: Hears the count after every document (and once before the first), from this thread.
        stop: Checked while waiting: once true, nothing more starts and running converters are killed.
        deadline: A `time.monotonic` time no conversion may run past.
        max_bytes: Cap on the converted texts together: past it the batch stops (`Batch.over_cap`).
        cache: Where conversions are kept.
    """
    batch = Batch([None] * len(jobs))
    if not jobs:
        return batch
    label = label_of(jobs)
    cache.store()  # an untrusted store is refused here, in the caller's thread, before any document is read
    cancel = threading.Event()
    done = cached = 0
    if progress is not None:
        progress(ConversionProgress(0, len(jobs), label))

    def run(job: DocumentJob) -> Outcome:
        if cancel.is_set():
            return Outcome(None, "the call stopped before it was converted", 0)
        seconds = None if deadline is None else deadline - time.monotonic()
        try:
            fd = job.open()
        except OSError as exc:
            return Outcome(None, f"cannot open: {exc.strerror}", 0)
        try:
            return convert_fd(fd, job.format, limits, cache=cache, cancel=cancel, seconds=seconds, servers=servers)
        finally:
            os.close(fd)

    servers = ConverterServers()
    workers = min(limits.parallel, len(jobs))
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="rlm-convert") as pool:
        pending = {pool.submit(run, job): index for index, job in enumerate(jobs)}
        try:
            while pending:
                finished, _ = concurrent.futures.wait(
                    pending, timeout=POLL_SECONDS, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in finished:
                    outcome = batch.outcomes[pending.pop(future)] = future.result()
                    done += 1
                    cached += outcome.cached
                    if progress is not None:
                        progress(ConversionProgress(done, len(jobs), label, cached))
                if max_bytes is not None and batch.converted_bytes > max_bytes:
                    batch.over_cap = True
                late = deadline is not None and time.monotonic() >= deadline
                if batch.over_cap or late or (stop is not None and stop()):
                    batch.stopped = not batch.over_cap
                    break
        finally:
            cancel.set()  # whatever ended the wait: no converter outlives this call
            for future in pending:
                future.cancel()
    servers.close()  # the pool has joined its threads: no conversion runs
    return batch
