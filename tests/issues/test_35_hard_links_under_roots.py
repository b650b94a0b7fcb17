"""Issue 35 (item 7, carried over to the walk): a hard link under an allowed root read a file outside it.

Eval's ``--data-dir`` refuses ``st_nlink > 1``; the walk that every adapter reads paths with (`load_paths`)
did not: a folder walk, a glob, a path named directly and a document all read a hard link to a file outside
the roots, while a symlink to it is refused. Now each is skipped with a reason, at listing and again at reading
(a file linked after it was listed).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.files import FileLoadError, _load, load_paths

SECRET = "the secret outside the roots"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("alpha inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(SECRET)
    os.link(outside / "secret.md", root / "docs" / "linked.md")
    return root


def reasons(paths: list[str], root: Path) -> tuple[str, dict[str, str]]:
    loaded = load_paths(paths, [root])
    text = "".join(f.text for f in loaded.files)
    return text, {s.path: s.reason for s in loaded.skipped}


@pytest.mark.parametrize("paths", [["docs"], ["docs/*.md"], ["**/*.md"], ["docs/linked.md", "docs/a.md"]])
def test_a_hard_link_to_a_file_outside_the_roots_is_skipped_however_it_is_named(tree: Path, paths: list[str]) -> None:
    text, skipped = reasons(paths, tree)
    assert SECRET not in text and "alpha inside" in text
    assert skipped["docs/linked.md"].startswith("a hard link (2 names share the file")
    assert "copy it in" in skipped["docs/linked.md"]


def test_a_hard_link_named_alone_is_one_error_naming_it(tree: Path) -> None:
    with pytest.raises(FileLoadError, match="no readable text files") as info:
        load_paths(["docs/linked.md"], [tree])
    assert "a hard link" in str(info.value) and SECRET not in str(info.value)


def test_a_file_linked_after_it_was_listed_is_refused_when_it_is_read(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attacker swaps a listed name for a hard link between the listing and the read."""
    original: Callable[..., Any] = _load._read
    done: list[bool] = []

    def swap_then_read(*args: Any, **kwargs: Any) -> Any:
        if not done:
            done.append(True)
            victim = tree / "docs" / "a.md"
            victim.unlink()
            os.link(tree.parent / "outside" / "secret.md", victim)
        return original(*args, **kwargs)

    monkeypatch.setattr(_load, "_read", swap_then_read)
    (tree / "docs" / "linked.md").unlink()
    (tree / "docs" / "b.md").write_text("beta inside\n")
    loaded = load_paths(["docs"], [tree])
    assert SECRET not in "".join(f.text for f in loaded.files)
    assert [f.path for f in loaded.files] == ["docs/b.md"]
    skipped = {s.path: s.reason for s in loaded.skipped}
    assert skipped["docs/a.md"].startswith("cannot open: it is a hard link (2 names share the file")


def test_a_hard_linked_gitignore_still_applies_its_rules(tree: Path) -> None:
    """Its text never reaches a model (it only passes names over): refusing it would read what it ignores."""
    (tree / "docs" / "linked.md").unlink()
    rules = tree.parent / "rules"
    rules.write_text("private.md\n")
    os.link(rules, tree / "docs" / ".gitignore")
    (tree / "docs" / "private.md").write_text("ignored on purpose\n")
    loaded = load_paths(["docs"], [tree])
    assert [f.path for f in loaded.files] == ["docs/a.md"]  # private.md passed over by the rules
    skipped = {s.path: s.reason for s in loaded.skipped}
    assert skipped["docs/.gitignore"].startswith("a hard link")  # as a file to read, it is refused as any other
