"""The sandboxes' resource limits: defaults, parsing, and the words for a limit that was hit.

Shared by the subprocess, Docker and E2B sandboxes, which enforce the same limits by different means.
"""

from __future__ import annotations

import signal

from rlm_adapters.core.sandbox.base import CellResult

DEFAULT_MEMORY_BYTES = 2 * 1024**3
DEFAULT_CELL_TIMEOUT = 120.0
DEFAULT_CPU_SECONDS = 100.0
DEFAULT_PROCESSES = 256
DEFAULT_FILE_SIZE = 1024**3
START_TIMEOUT = 30.0


def parse_size(value: int | str | None) -> int | None:
    """Bytes from an int or a string such as ``"512MiB"`` / ``"2GiB"`` / ``"1G"``."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip().lower().removesuffix("b").removesuffix("i")
    units = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    try:
        if text and text[-1] in units:
            return int(float(text[:-1]) * units[text[-1]])
        return int(text)
    except ValueError:
        raise ValueError(f"cannot read the size {value!r}; use bytes or a string like '2GiB'") from None


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


def size_text(n: int | None) -> str:
    if n is None:
        return "none"
    return f"{n / 1024**3:g} GiB" if n >= 1024**3 else f"{n / 1024**2:g} MiB"


def explain_limits(
    result: CellResult, memory: int | None, file_size: int | None, processes: int | None, capture_chars: int
) -> CellResult:
    """Name the limit behind a bare OS error, so the model knows what it hit and that it may go on."""
    error = result.error or ""
    last = error.rsplit("\n", 1)[-1]
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
            f"keeps {capture_chars:,}]"
        )
    return result
