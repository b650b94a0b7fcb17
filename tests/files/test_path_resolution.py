"""Relative paths: the working folder first, then each root (issue 17, item 6); errors speak of `roots=`."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_adapters.files import FileLoadError, PathNotAllowedError, load_paths


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder (the working folder) holding `notes/` and a second root `data/`."""
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("note a")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "b.csv").write_text("x,y")
    (tmp_path / "data" / "notes").mkdir()
    (tmp_path / "data" / "notes" / "shadow.md").write_text("the data root's own notes folder")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_root_named_relatively_is_the_folder_the_user_means(project: Path) -> None:
    loaded = load_paths(["./notes"], ["./notes"])
    assert [f.text for f in loaded.files] == ["note a"]  # not ./notes/notes


def test_the_working_folder_wins_over_a_root_with_the_same_name(project: Path) -> None:
    loaded = load_paths(["notes"], ["data", "notes"])
    assert [f.text for f in loaded.files] == ["note a"]


def test_a_path_missing_from_the_working_folder_is_found_in_a_later_root(project: Path) -> None:
    loaded = load_paths(["b.csv", "a.md"], ["data", "notes"])
    assert sorted(f.text for f in loaded.files) == ["note a", "x,y"]


def test_globs_are_tried_from_the_working_folder_then_each_root(project: Path) -> None:
    assert [f.text for f in load_paths(["notes/*.md"], ["notes"]).files] == ["note a"]
    assert [f.text for f in load_paths(["*.csv"], ["notes", "data"]).files] == ["x,y"]


def test_a_missing_path_says_everywhere_it_looked(project: Path) -> None:
    with pytest.raises(FileLoadError) as caught:
        load_paths(["nope.txt"], ["notes", "data"])
    message = str(caught.value)
    assert "'nope.txt'" in message
    for place in (project / "notes" / "nope.txt", project / "data" / "nope.txt"):
        assert str(place) in message


def test_a_file_outside_the_roots_is_refused_in_python_terms(project: Path) -> None:
    (project / "secret.txt").write_text("s")
    with pytest.raises(PathNotAllowedError) as caught:
        load_paths(["secret.txt"], ["notes"])
    message = str(caught.value)
    assert "roots=" in message and str(project / "secret.txt") in message
    with pytest.raises(PathNotAllowedError, match="roots="):
        load_paths([str(project / "*.txt")], ["notes"])


def test_an_explicit_base_is_the_only_start(project: Path) -> None:
    with pytest.raises(FileLoadError, match="no such file"):
        load_paths(["a.md"], ["notes", "data"], base=project / "data")


def test_files_under_the_filesystem_root_keep_their_leading_slash(project: Path) -> None:
    (project / "bin").write_bytes(b"\x00\x01")
    loaded = load_paths([str(project / "bin"), "notes/a.md"], ["/"], base=project, display_base=project / "notes")
    assert [s.path for s in loaded.skipped] == [str(project / "bin")]
