"""Issue 35, also covered: a full disk or a read-only cache path.

A run whose cache cannot write still returns its answer (a paid reply is used unstored), and says so once, in
one line naming the file, what is wrong and what to do. The disk is a real tiny tmpfs, the read-only path a real
read-only bind mount (chmod does not stop root); both need root and skip without it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlm_adapters import RLM, ScriptedModel, testing
from rlm_adapters.errors import CacheError

SCRIPT = ("```repl\nprint(len(llm_query_batched(['a', 'b', 'c'])))\n```", "FINAL(done)")


def mount(*args: str) -> None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs or a read-only bind mount needs root (the mount command)")
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(args)} failed here (no CAP_SYS_ADMIN?): {done.stderr.strip()}")


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir(mode=0o700)
    mount("-t", "tmpfs", "-o", "size=512k,mode=0700", "tmpfs", str(disk))
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def bind(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    real, view = tmp_path / "real", tmp_path / "view"
    real.mkdir(mode=0o700)
    view.mkdir(mode=0o700)
    mount("--bind", str(real), str(view))
    yield real, view
    subprocess.run(["umount", "-l", str(view)], check=False)


def fill(disk: Path) -> None:
    descriptor = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(descriptor, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == 28  # ENOSPC: the disk is full now
    finally:
        os.close(descriptor)


def cache_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "rlm_adapters.cache"]


def test_a_full_disk_costs_no_answer_and_says_so_once(tiny_disk: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tiny_disk / "calls.sqlite"
    leaf = ScriptedModel(lambda messages: "L" * 40_000, model_name="leaf")
    rlm = RLM(
        backend=testing.by_turn(*SCRIPT, model_name="root"), other_backends=[leaf], environment="local", cache=path
    )
    fill(tiny_disk)
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.cache"):
        result = rlm.completion("ctx", "q")
    rlm.close()
    assert result.response == "done" and len(leaf.calls) == 3  # every paid reply was used
    (warning,) = cache_warnings(caplog)
    assert "\n" not in warning and repr(str(path)) in warning
    assert "the disk it is on is full" in warning and "free some space there" in warning


def test_a_cache_on_a_full_disk_is_refused_before_anything_is_paid(tiny_disk: Path) -> None:
    fill(tiny_disk)
    with pytest.raises(CacheError) as info:
        RLM(backend=testing.by_turn("FINAL(x)"), environment="local", cache=tiny_disk / "calls.sqlite")
    message = str(info.value)
    assert "\n" not in message and repr(str(tiny_disk / "calls.sqlite")) in message
    assert "cannot be created" in message or "is full" in message


def test_a_cache_made_read_only_mid_session_costs_no_answer(
    bind: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    _real, view = bind
    path = view / "calls.sqlite"
    leaf = ScriptedModel(lambda messages: "L" * 40_000, model_name="leaf")
    root = testing.by_turn(*SCRIPT, model_name="root")
    rlm = RLM(backend=root, other_backends=[leaf], environment="local", cache=path)
    assert rlm.completion("ctx", "first").response == "done"
    assert rlm.cache is not None
    rlm.cache.close()  # as after idle seconds: the next call connects again, now to a read-only file system
    mount("-o", "remount,ro,bind", str(view))
    with caplog.at_level(logging.WARNING, logger="rlm_adapters.cache"):
        result = rlm.completion("ctx", "second")
    rlm.close()
    # Another question, so nothing could be replayed anyway: every call went live and the answer is kept.
    assert result.response == "done" and (len(root.calls), len(leaf.calls)) == (4, 6)
    (warning,) = cache_warnings(caplog)
    assert "\n" not in warning and repr(str(path)) in warning and "read-only file system" in warning


def test_a_cache_on_a_read_only_path_is_refused_in_one_line(bind: tuple[Path, Path]) -> None:
    real, view = bind
    mount("-o", "remount,ro,bind", str(view))
    for name in ("new.sqlite", "calls.sqlite"):
        if name == "calls.sqlite":  # an existing cache, made through the writable side
            RLM(backend=testing.by_turn("FINAL(x)"), environment="local", cache=real / name).close()
        with pytest.raises(CacheError, match="read-only file system") as info:
            RLM(backend=testing.by_turn("FINAL(x)"), environment="local", cache=view / name)
        assert "\n" not in str(info.value) and repr(str(view / name)) in str(info.value)
