"""files/_paths.py: the one "path under a root" test every check of the loader goes through."""

from __future__ import annotations

import pytest

from rlm_adapters.files import is_under
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
