"""One `WorkerLimits`, parsed once from a sandbox's keywords, for every sandbox that runs the worker elsewhere."""

from __future__ import annotations

import pytest

from rlm_adapters.core.sandbox.base import CellResult
from rlm_adapters.core.sandbox.factory import make_sandbox
from rlm_adapters.core.sandbox.limits import WorkerLimits, describe_exit, explain_limits
from rlm_adapters.errors import ConfigurationError


def test_parse_reads_sizes_once_and_keeps_the_defaults_for_the_rest() -> None:
    limits = WorkerLimits.parse({"memory_limit": "512MiB", "file_size_limit": 4096, "cpu_time_limit": None})
    assert limits == WorkerLimits(memory_bytes=512 * 1024**2, file_size_bytes=4096, cpu_seconds=None)
    assert WorkerLimits.parse({}) == WorkerLimits()
    with pytest.raises(AttributeError):
        limits.memory_bytes = 1  # type: ignore[misc]  # frozen: one parse, shared by a sandbox and its spares


def test_parse_refuses_an_unknown_keyword_and_a_process_limit_it_cannot_hold() -> None:
    with pytest.raises(TypeError, match="'memory'"):
        WorkerLimits.parse({"memory": "1GiB"})
    with pytest.raises(TypeError, match="'process_limit'"):
        WorkerLimits.parse({"process_limit": 8}, processes=False)
    assert WorkerLimits.parse({}, processes=False).processes is None
    with pytest.raises(ValueError, match="'lots'"):
        WorkerLimits.parse({"memory_limit": "lots"})


@pytest.mark.parametrize("kind", ["subprocess", "docker", "e2b", "modal", "prime", "daytona"])
def test_every_worker_sandbox_takes_the_same_limits(kind: str) -> None:
    options = {"cell_timeout": 9.0, "memory_limit": "1GiB", "cpu_time_limit": 7.0, "file_size_limit": "2MiB",
               "capture_chars": 500}  # fmt: skip
    sandbox = make_sandbox(kind, options)
    expected = WorkerLimits(9.0, 1024**3, 7.0, 256 if kind in ("subprocess", "docker") else None, 2 * 1024**2, 500)
    assert sandbox.limits == expected  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match=f"environment={kind!r}: .*'memory_bytes'"):
        make_sandbox(kind, {"memory_bytes": 1})


@pytest.mark.parametrize("kind", ["e2b", "modal", "prime", "daytona"])
def test_a_cloud_sandbox_refuses_a_process_limit_rather_than_ignore_it(kind: str) -> None:
    with pytest.raises(ConfigurationError, match="'process_limit'"):
        make_sandbox(kind, {"process_limit": 8})


def test_the_init_frame_and_the_words_come_from_the_same_limits() -> None:
    limits = WorkerLimits(cell_timeout=9.0, memory_bytes=1024**3, cpu_seconds=None, processes=40, file_size_bytes=None)
    assert limits.frame() == {"memory_bytes": 1024**3, "cell_timeout": 9.0}
    assert limits.frame(processes=True) == {"memory_bytes": 1024**3, "processes": 40, "cell_timeout": 9.0}
    assert limits.describe() == (
        "limits: memory 1 GiB, processes+threads 40, CPU none per cell, 9 s of computing per cell (waits on model "
        "calls not counted), file size none, "
        "output 1,000,000 chars"
    )


def test_a_bare_os_error_is_explained_by_the_limit_behind_it() -> None:
    limits = WorkerLimits(memory_bytes=300 * 1024**2, capture_chars=5)
    hit = explain_limits(CellResult(output="12345", output_chars=9, error="Traceback\nMemoryError"), limits)
    assert hit.error is not None and hit.error.endswith("(limit: memory_limit of 300 MiB; your variables survived)")
    assert hit.output.endswith("[output cut: the cell printed 9 chars; the limit (capture_chars) keeps 5]")


def test_how_a_worker_ended_in_words() -> None:
    assert describe_exit(-9).startswith("was killed by SIGKILL")
    assert describe_exit(139) == "was killed by SIGSEGV"  # bubblewrap's init reports 128 + signal
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(None) == "is not responding"
