"""files/_paths.py: the one "path under a root" test every check of the loader goes through."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_adapters.files import PathNotAllowedError, is_under, load_paths
from rlm_adapters.files._paths import shown


@pytest.mark.parametrize(
    ("path", "root", "expected"),
    [
        ("/a/b", "/a/b", True),  # the root itself
        ("/a/b/c.txt", "/a/b", True),
        ("/a/b/c/d", "/a/b", True),
        ("/a/bc", "/a/b", False),  # a sibling sharing a prefix
        ("/a/bc/d", "/a/b", False),
        ("/a/b.txt", "/a/b", False),
        ("/a", "/a/b", False),  # the parent
        ("/", "/a/b", False),
        ("/a/b/", "/a/b", True),  # trailing slashes on either side
        ("/a/b", "/a/b/", True),
        ("/a/b/c", "/a/b/", True),
        ("/a/bc", "/a/b/", False),
        ("/a/b/", "/a/b//", True),
        ("/", "/", True),  # the file system root holds everything absolute
        ("/etc/passwd", "/", True),
        ("/x", "//", True),
        ("/a/b/../c", "/a/b", False),  # compared after normpath: this is /a/c
        ("/a/b/./c", "/a/b", True),
        ("/a//b/c", "/a/b", True),
        ("/a/b", "/a/b/c", False),
    ],
)
def test_is_under(path: str, root: str, expected: bool) -> None:
    assert is_under(path, root) is expected


def test_shown_escapes_bytes_that_are_not_utf8() -> None:
    name = b"caf\xe9.md".decode("utf-8", "surrogateescape")
    assert shown(name) == "caf\\xe9.md"
    assert shown("café.md") == "café.md"


def test_a_sibling_folder_sharing_the_roots_prefix_is_refused_by_path_glob_and_symlink(tmp_path: Path) -> None:
    """Every caller of `is_under` in the loader: a path, a glob's literal folder, a symlink's target."""
    root = tmp_path / "root"
    sibling = tmp_path / "root-secrets"  # "/.../root" is a prefix of its spelling
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("inside")
    sibling.mkdir()
    (sibling / "key.md").write_text("SECRET")
    (root / "docs" / "link.md").symlink_to(sibling / "key.md")
    with pytest.raises(PathNotAllowedError, match="outside the allowed roots"):
        load_paths([str(sibling / "key.md")], [root])
    with pytest.raises(PathNotAllowedError, match="outside the allowed roots"):
        load_paths([f"{sibling}/*.md"], [root])
    loaded = load_paths(["docs"], [root], base=root)
    assert [f.text for f in loaded.files] == ["inside"]
    assert [(s.path, s.reason) for s in loaded.skipped] == [
        ("docs/link.md", "symlink pointing outside the allowed roots")
    ]
