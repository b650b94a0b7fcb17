"""A worker's limits: defaults, one parse of ``environment_kwargs``, and the words for a limit that was hit.

The subprocess, Docker, E2B and cloud sandboxes enforce the same limits by different means; each takes
them as keyword arguments (`LimitOptions`) and parses them once into a frozen `WorkerLimits`.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from rlm_adapters.core.sandbox.base import CellResult
from rlm_adapters.core.sandbox.programs.worker import DEFAULT_CAPTURE_CHARS
from rlm_adapters.core.units import human_bytes, parse_size

DEFAULT_MEMORY_BYTES = 2 * 1024**3
DEFAULT_CELL_TIMEOUT = 120.0
DEFAULT_CPU_SECONDS = 100.0
DEFAULT_PROCESSES = 256
DEFAULT_FILE_SIZE = 1024**3
START_TIMEOUT = 30.0


class LimitOptions(TypedDict, total=False):
    """The limit keywords a worker sandbox takes (``environment_kwargs``); see `WorkerLimits` for each."""

    cell_timeout: float | None
    memory_limit: int | str | None
    cpu_time_limit: float | None
    process_limit: int | None
    file_size_limit: int | str | None
    capture_chars: int


@dataclass(frozen=True)
class WorkerLimits:
    """The limits of one sandbox's worker, in bytes and seconds (None: no limit).

    Attributes:
        cell_timeout: Wall seconds a cell may run before the worker is killed and restarted
            (``cell_timeout``).
        memory_bytes: Memory of the worker (``memory_limit``, bytes or ``"2GiB"``).
        cpu_seconds: CPU seconds a cell may use; the cell stops and the variables survive (``cpu_time_limit``).
        processes: Processes + threads the sandbox may hold (``process_limit``); None where the sandbox
            cannot count them (the cloud sandboxes take no such keyword).
        file_size_bytes: Largest file the worker may write (``file_size_limit``, bytes or ``"1GiB"``).
        capture_chars: How much of a cell's printed output is kept (``capture_chars``).
    """

    cell_timeout: float | None = DEFAULT_CELL_TIMEOUT
    memory_bytes: int | None = DEFAULT_MEMORY_BYTES
    cpu_seconds: float | None = DEFAULT_CPU_SECONDS
    processes: int | None = DEFAULT_PROCESSES
    file_size_bytes: int | None = DEFAULT_FILE_SIZE
    capture_chars: int = DEFAULT_CAPTURE_CHARS

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, processes: bool = True) -> WorkerLimits:
        """The limits from a sandbox's keyword arguments (`LimitOptions`); defaults for the missing ones.

        Args:
            options: ``cell_timeout``, ``memory_limit``, ``cpu_time_limit``, ``process_limit``,
                ``file_size_limit``, ``capture_chars``.
            processes: Whether this sandbox can enforce ``process_limit`` (refused otherwise).

        Raises:
            TypeError: An unknown keyword (the factory reports it as a `ConfigurationError`).
            ValueError: A size that cannot be read.
        """
        known = set(LimitOptions.__annotations__) - (set() if processes else {"process_limit"})
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unexpected keyword argument {unknown[0]!r}; the limits it takes: {sorted(known)}")
        defaults = cls()
        return cls(
            cell_timeout=options.get("cell_timeout", defaults.cell_timeout),
            memory_bytes=parse_size(options.get("memory_limit", defaults.memory_bytes)),
            cpu_seconds=options.get("cpu_time_limit", defaults.cpu_seconds),
            processes=options.get("process_limit", defaults.processes) if processes else None,
            file_size_bytes=parse_size(options.get("file_size_limit", defaults.file_size_bytes)),
            capture_chars=options.get("capture_chars", defaults.capture_chars),
        )

    def frame(self, *, processes: bool = False) -> dict[str, int | float]:
        """The ``limits`` of the worker's ``init`` frame: what the worker applies to itself.

        Args:
            processes: The worker applies the process limit too (RLIMIT_NPROC, where no cgroup holds it).
        """
        limits = {
            "memory_bytes": self.memory_bytes,
            "file_size_bytes": self.file_size_bytes,
            "cpu_seconds": self.cpu_seconds,
            "processes": self.processes if processes else None,
            "cell_timeout": self.cell_timeout,  # only said in the worker's message when the host interrupts a cell
        }
        return {name: value for name, value in limits.items() if value is not None}

    def describe(self) -> str:
        """The limits in words, for a sandbox's `isolation` text."""
        processes = "" if self.processes is None else f"processes+threads {self.processes}, "
        return (
            f"limits: memory {size_text(self.memory_bytes)}, {processes}CPU {seconds_text(self.cpu_seconds)} per "
            f"cell, {seconds_text(self.cell_timeout)} of computing per cell (waits on model calls not counted), "
            f"file size {size_text(self.file_size_bytes)}, "
            f"output {self.capture_chars:,} chars"
        )


def size_text(n: int | None) -> str:
    """A size limit in words: ``2 GiB``, or ``none``."""
    return "none" if n is None else human_bytes(n)


def seconds_text(seconds: float | None) -> str:
    """A time limit in words: ``120 s``, or ``none``."""
    return f"{seconds:g} s" if seconds else "none"


def describe_exit(returncode: int | None) -> str:
    """Words for how a process ended."""
    if returncode is None:
        return "is not responding"
    # bubblewrap's init and shells report a child killed by signal N as exit code 128 + N.
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else 0
    if number:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        hint = " (likely the memory limit or a kill from inside the cell)" if name == "SIGKILL" else ""
        return f"was killed by {name}{hint}"
    return f"exited with code {returncode}"


def explain_limits(result: CellResult, limits: WorkerLimits) -> CellResult:
    """Name the limit behind a bare OS error, so the model knows what it hit and that it may go on."""
    error = result.error or ""
    last = error.rsplit("\n", 1)[-1]
    memory, file_size, processes = limits.memory_bytes, limits.file_size_bytes, limits.processes
    if last.startswith("MemoryError") and memory:
        result.error = f"{error}\n(limit: memory_limit of {size_text(memory)}; your variables survived)"
    elif "File too large" in last and file_size:
        result.error = f"{error}\n(limit: file_size_limit of {size_text(file_size)}; your variables survived)"
    elif "No space left on device" in last and file_size:
        result.error = (
            f"{error}\n(limit: file_size_limit of {size_text(file_size)} for all files of the sandbox together; "
            "your variables survived)"
        )
    elif ("Resource temporarily unavailable" in last or "can't start new thread" in last) and processes:
        result.error = f"{error}\n(limit: process_limit of {processes} processes+threads; your variables survived)"
    if result.output_chars > len(result.output):
        result.output += (
            f"\n[output cut: the cell printed {result.output_chars:,} chars; the limit (capture_chars) "
            f"keeps {limits.capture_chars:,}]"
        )
    return result
