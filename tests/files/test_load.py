"""files/ (`load_paths`): what may be read, and what is said about what may not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlm_adapters.files import FileLoadError, PathNotAllowedError, load_paths


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("alpha")
    (root / "docs" / "b.md").write_text("beta")
    (root / "node_modules" / "pkg").mkdir(parents=True)
    (root / "node_modules" / "pkg" / "x.md").write_text("vendored")
    (root / "bin.dat").write_bytes(b"\x00\x01binary")
    (root / "bad.txt").write_bytes(b"ok \xff bad")
    (root / ".gitignore").write_text("*.log\n")
    (root / "skip.log").write_text("ignored")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret-name.txt").write_text("secret")
    os.symlink(outside, root / "link-dir")
    os.symlink(outside / "secret-name.txt", root / "link.txt")
    return root


def test_folder_walk_skips_binary_ignored_vendored_and_marks_bad_utf8(tree: Path) -> None:
    loaded = load_paths(["."], [tree])
    assert sorted(f.path for f in loaded.files) == [".gitignore", "bad.txt", "docs/a.md", "docs/b.md"]
    assert next(f for f in loaded.files if f.path == "bad.txt").invalid_utf8
    reasons = {s.path: s.reason for s in loaded.skipped}
    assert reasons["bin.dat"] == "binary file"
    assert "outside the allowed roots" in reasons["link.txt"]


@pytest.mark.parametrize("path", ["../outside/secret-name.txt", "link.txt", "/etc/passwd"])
def test_paths_outside_the_roots_are_refused(tree: Path, path: str) -> None:
    with pytest.raises(PathNotAllowedError, match="outside the allowed roots"):
        load_paths([path], [tree])


@pytest.mark.parametrize("pattern", ["../outside/*", "/etc/*", "docs/*/../../../outside/*"])
def test_globs_reaching_outside_are_refused_before_expansion_naming_nothing(tree: Path, pattern: str) -> None:
    with pytest.raises(PathNotAllowedError) as info:
        load_paths([pattern], [tree])
    assert "secret-name" not in str(info.value) and "passwd" not in str(info.value)


def test_glob_through_a_symlinked_folder_names_only_the_link_never_what_is_behind_it(tree: Path) -> None:
    loaded = load_paths(["**/*.txt", "docs/*.md"], [tree])
    reasons = {s.path: s.reason for s in loaded.skipped}
    # The same words whether or not anything outside matches: only the links (inside the root) are named.
    assert reasons["link-dir"] == "symlink pointing outside the allowed roots"
    assert reasons["link.txt"] == "symlink pointing outside the allowed roots"
    assert "secret-name" not in repr(loaded.skipped) and "match" not in repr(loaded.skipped)
    assert {f.path for f in loaded.files} == {"docs/a.md", "docs/b.md", "bad.txt"}
    (tree.parent / "outside" / "secret-name.txt").unlink()
    again = load_paths(["**/*.txt", "docs/*.md"], [tree])
    assert again.skipped == loaded.skipped


def test_glob_skips_vendored_folders(tree: Path) -> None:
    assert {f.path for f in load_paths(["**/*.md"], [tree]).files} == {"docs/a.md", "docs/b.md"}


def test_cap_errors_name_the_caps_as_the_callers_interface_spells_them(tree: Path) -> None:
    flags = {"max_bytes": "--max-bytes", "max_files": "--max-files"}
    with pytest.raises(FileLoadError, match=r"over the cap of 8 bytes \(--max-bytes\)"):
        load_paths(["docs"], [tree], max_bytes=8, cap_names=flags)
    with pytest.raises(FileLoadError, match=r"\(or raise --max-files\)"):
        load_paths(["docs"], [tree], max_files=1, cap_names=flags)
    with pytest.raises(ValueError, match="cap_names names no cap: 'max_bites'"):
        load_paths(["docs"], [tree], cap_names={"max_bites": "--max-bites"})


def test_caps_and_empty_inputs_give_one_line_errors(tree: Path) -> None:
    with pytest.raises(FileLoadError, match=r"over the cap of 8 bytes \(max_bytes=\)"):
        load_paths(["docs"], [tree], max_bytes=8)
    with pytest.raises(FileLoadError, match=r"more than 1 files; narrow them \(or raise max_files=\)"):
        load_paths(["docs"], [tree], max_files=1)
    (tree / "empty").mkdir()
    with pytest.raises(FileLoadError, match="no readable text files"):
        load_paths(["empty"], [tree])
    with pytest.raises(FileLoadError, match="no such file or folder: 'nope'"):
        load_paths(["nope"], [tree])
    with pytest.raises(FileLoadError, match="no paths were given"):
        load_paths([], [tree])


def test_documents_carry_path_size_and_utf8_flag(tree: Path) -> None:
    docs = load_paths(["docs/a.md"], [tree]).documents()
    assert docs == [
        {"id": "docs/a.md", "text": "alpha", "metadata": {"path": "docs/a.md", "size": 5, "invalid_utf8": False}}
    ]
