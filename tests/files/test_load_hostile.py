"""files/ (loader, walker, globs) against a hostile tree: races, special files, loops, odd names (issue 12, item 8).

Races are made deterministic by running the attacker's step from inside the loader, at the moment the
finding names (after the check, before the read), instead of hoping a thread lands in the window.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.files import FileLoadError, PathNotAllowedError, _load, _walk, load_paths
from rlm_adapters.files._gitignore import GITIGNORE_MAX_BYTES

SECRET = "the secret outside the roots"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("alpha inside\n")
    (root / "docs" / "b.md").write_text("beta inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text(SECRET)
    (outside / "b.md").write_text(SECRET)
    return root


def _swap_for_symlink(folder: Path, target: Path) -> None:
    folder.rename(folder.with_name(folder.name + ".moved"))
    folder.symlink_to(target)


def _before(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, step: Callable[[], None]) -> None:
    """Run `step` once, just before the first call of `owner.name`."""
    original = getattr(owner, name)
    done: list[bool] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            step()
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapped)


def test_folder_swapped_for_a_symlink_between_check_and_read_is_not_read(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _before(monkeypatch, _load, "_read", lambda: _swap_for_symlink(tree / "docs", tree.parent / "outside"))
    with pytest.raises(FileLoadError, match="no readable text files") as info:
        load_paths(["docs"], [tree])
    assert "replaced by a symlink during the call" in str(info.value)
    assert SECRET not in str(info.value)


def test_folder_swapped_for_a_symlink_before_the_walk_is_not_walked(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tree / "notes.txt").write_text("notes\n")
    _before(monkeypatch, _walk.Tree, "walk_node", lambda: _swap_for_symlink(tree / "docs", tree.parent / "outside"))
    loaded = load_paths(["docs", "notes.txt"], [tree])
    assert [f.path for f in loaded.files] == ["notes.txt"]
    assert [(s.path, s.reason) for s in loaded.skipped] == [
        ("docs", "it was replaced by a symlink during the call (or is a symlink loop); not followed")
    ]


def test_file_grown_past_the_cap_after_listing_is_refused_not_read(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def grow() -> None:
        with (tree / "docs" / "a.md").open("ab") as handle:
            handle.truncate(2 * 1024**2)

    _before(monkeypatch, _load, "_read", grow)
    with pytest.raises(FileLoadError, match=r"docs/a.md grew to 2 MiB .* over what is left of the cap"):
        load_paths(["docs"], [tree], max_bytes=1024**2)


def test_file_growing_while_it_is_read_is_read_as_it_was_checked(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def grow() -> None:
        with (tree / "docs" / "a.md").open("ab") as handle:
            handle.write(b"x" * 4 * 1024**2)

    _before(monkeypatch, _load, "read_at_most", grow)
    loaded = load_paths(["docs/a.md"], [tree], max_bytes=1024**2)
    assert [(f.path, f.text, f.size) for f in loaded.files] == [("docs/a.md", "alpha inside\n", 13)]


def test_gitignore_symlinked_to_dev_zero_is_skipped_and_the_walk_goes_on(tree: Path) -> None:
    (tree / "docs" / ".gitignore").symlink_to("/dev/zero")
    loaded = load_paths(["docs"], [tree])
    assert sorted(f.path for f in loaded.files) == ["docs/a.md", "docs/b.md"]
    assert ("docs/.gitignore", "symlink pointing outside the allowed roots; its rules were not applied") in [
        (s.path, s.reason) for s in loaded.skipped
    ]


def test_gitignore_reaching_a_device_under_a_root_is_never_read(tree: Path) -> None:
    (tree / "docs" / ".gitignore").symlink_to("/dev/zero")
    loaded = load_paths(["docs"], [tree, "/dev"])
    assert ("root/docs/.gitignore", "a device, not a regular file; its rules were not applied") in [
        (s.path, s.reason) for s in loaded.skipped
    ]


def test_gitignore_that_is_a_fifo_is_skipped_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "docs" / ".gitignore")
    loaded = load_paths(["docs"], [tree])
    assert sorted(f.path for f in loaded.files) == ["docs/a.md", "docs/b.md"]
    reasons = {s.path: s.reason for s in loaded.skipped}
    assert reasons["docs/.gitignore"] == "a FIFO (named pipe), not a regular file; its rules were not applied"


def test_oversized_gitignore_is_skipped(tree: Path) -> None:
    (tree / "docs" / ".gitignore").write_text("*.md\n" + "#" * GITIGNORE_MAX_BYTES)
    loaded = load_paths(["docs/a.md", "docs"], [tree])
    reasons = {s.path: s.reason for s in loaded.skipped}
    assert reasons["docs/.gitignore"] == "larger than 1,048,576 bytes; its rules were not applied"
    assert "docs/b.md" in {f.path for f in loaded.files}  # its *.md rule was not applied


def test_fifos_sockets_in_a_folder_and_as_a_path_are_skipped_with_a_reason(tree: Path) -> None:
    import socket

    os.mkfifo(tree / "docs" / "pipe")
    os.mkfifo(tree / "named-pipe")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tree / "docs" / "sock"))
        loaded = load_paths(["docs", "named-pipe"], [tree])
    finally:
        sock.close()
    assert sorted(f.path for f in loaded.files) == ["docs/a.md", "docs/b.md"]
    assert {s.path: s.reason for s in loaded.skipped} == {
        "docs/pipe": "a FIFO (named pipe), not a regular file",
        "docs/sock": "a socket, not a regular file",
        "named-pipe": "a FIFO (named pipe), not a regular file",
    }


def test_fifo_swapped_in_for_a_file_after_listing_is_not_opened_for_blocking(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def swap() -> None:
        (tree / "docs" / "a.md").unlink()
        os.mkfifo(tree / "docs" / "a.md")

    _before(monkeypatch, _load, "_read", swap)
    loaded = load_paths(["docs"], [tree])
    assert [f.path for f in loaded.files] == ["docs/b.md"]
    assert [(s.path, s.reason) for s in loaded.skipped] == [("docs/a.md", "a FIFO (named pipe), not a regular file")]


def test_glob_over_symlink_loops_finishes_and_reads_each_file_once(tree: Path) -> None:
    (tree / "docs" / "up").symlink_to("..")  # back to the root
    (tree / "docs" / "again").symlink_to(tree / "docs")  # to itself
    (tree / "ping").symlink_to("pong")
    (tree / "pong").symlink_to("ping")
    (tree / "self").symlink_to("self")
    loaded = load_paths(["**/*.md", "**"], [tree])
    assert sorted(f.path for f in loaded.files) == ["docs/a.md", "docs/b.md"]
    reasons = {s.path: s.reason for s in loaded.skipped}
    assert reasons["self"] == reasons["ping"] == reasons["pong"] == "a symlink loop"


def test_folder_walk_over_symlink_loops_skips_them_by_name(tree: Path) -> None:
    (tree / "docs" / "up").symlink_to("..")
    (tree / "docs" / "self").symlink_to("self")
    loaded = load_paths(["docs"], [tree])
    assert sorted(f.path for f in loaded.files) == ["docs/a.md", "docs/b.md"]
    # docs/up leads to the root, whose walk meets docs again: that is where the loop is cut.
    assert {s.path: s.reason for s in loaded.skipped} == {
        "docs/self": "a symlink loop",
        "docs": "reached again through a symlink (a loop); not read twice",
    }


def test_self_loop_symlink_named_directly_is_a_skipped_entry_not_an_opaque_error(tree: Path) -> None:
    (tree / "self").symlink_to("self")
    loaded = load_paths(["self", "docs/a.md"], [tree])
    assert [f.path for f in loaded.files] == ["docs/a.md"]
    assert [(s.path, s.reason) for s in loaded.skipped] == [("self", "a symlink loop")]


def test_non_utf8_file_names_are_shown_escaped_and_serialise(tree: Path) -> None:
    name = os.fsencode(tree / "docs") + b"/caf\xe9.md"
    with open(name, "wb") as handle:
        handle.write(b"latin name\n")
    loaded = load_paths(["docs"], [tree])
    assert sorted(f.path for f in loaded.files) == ["docs/a.md", "docs/b.md", "docs/caf\\xe9.md"]
    json.dumps(loaded.documents())  # no lone surrogates anywhere
    by_glob = load_paths(["docs/caf*"], [tree])
    assert [f.text for f in by_glob.files] == ["latin name\n"]


def test_listing_is_bounded_by_entries_time_and_cancellation(tree: Path) -> None:
    for i in range(200):
        (tree / "docs" / f"n{i}.txt").write_text("x")
    with pytest.raises(FileLoadError, match="stopped after 50 entries"):
        load_paths(["**/*.txt"], [tree], max_entries=50)
    with pytest.raises(FileLoadError, match="took longer than the time allowed"):
        load_paths(["**/*.txt"], [tree], timeout=0)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(FileLoadError, match="cancelled"):
        load_paths(["docs"], [tree], cancel=cancel)


def test_outside_refusals_say_the_same_whether_or_not_the_target_exists(tree: Path) -> None:
    (tree / "exists").symlink_to(tree.parent / "outside" / "a.md")
    (tree / "missing").symlink_to(tree.parent / "outside" / "nope.md")
    messages = []
    for name in ("exists", "missing"):
        with pytest.raises(PathNotAllowedError) as info:
            load_paths([name], [tree])
        messages.append(str(info.value).replace(name, "NAME"))
    assert messages[0] == messages[1]
    assert "outside" in messages[0] and str(tree.parent / "outside") not in messages[0]
