"""The folders a converter library's installed dependencies live in, so that they import behind the walls too.

The converter runs as ``python -I -S``: no site-packages on its path but the folders the host hands it,
and under bubblewrap no file of the host's but those folders and the interpreter's prefix. A library's own
folder is found with `importlib.util.find_spec`; its dependencies may live in another one (a virtual
environment over the system's site-packages, a user site, a ``--target`` folder), where the converter
would not see them: a required one then fails to import, and an optional one is silently done without
(openpyxl falls back from defusedxml to the standard library's XML parser). So each library's
distribution's requirements are followed, recursively, in its installed metadata (``Requires-Dist``:
markers evaluated for this interpreter, extras not followed), and the folder of each one installed is
added. Only metadata files are read; nothing is imported.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Callable, Iterable
from pathlib import Path

MAX_DISTRIBUTIONS = 200  # a dependency tree this wide is not a document library's: stop following it
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _normal(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_test() -> Callable[[str], bool]:
    """Whether a requirement's marker holds here (``packaging`` when installed; else every marker but an
    extra's counts as true, which at worst adds the folder of a dependency that is installed but unused)."""
    try:
        from packaging.markers import InvalidMarker, Marker
    except ImportError:
        return lambda marker: "extra" not in marker

    def holds(marker: str) -> bool:
        try:
            return Marker(marker).evaluate({"extra": ""})
        except InvalidMarker:
            return False

    return holds


def requirement_names(requirements: Iterable[str], holds: Callable[[str], bool]) -> list[str]:
    """The distributions named by `requirements` (``Requires-Dist`` lines) that apply here, not as extras.

    Args:
        requirements: The lines, as `importlib.metadata.requires` gives them.
        holds: Whether a marker holds here.
    """
    names = []
    for line in requirements:
        found = _NAME.match(line)
        if found is None:
            continue
        _, _, marker = line.partition(";")
        if marker.strip() and not holds(marker.strip()):
            continue
        names.append(found.group(1))
    return names


@functools.cache
def dependency_folders(distributions: tuple[str, ...]) -> tuple[str, ...]:
    """The ``sys.path`` folders that hold `distributions` and their installed dependencies, recursively
    (cached for the process: a few metadata files read per distribution, once).

    A distribution that is not installed is left out, with what it requires.
    """
    holds = _marker_test()
    queue = list(distributions)
    seen: set[str] = set()
    folders: list[str] = []
    while queue and len(seen) < MAX_DISTRIBUTIONS:
        name = queue.pop(0)
        if _normal(name) in seen:
            continue
        seen.add(_normal(name))
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed: the library does without it, inside the walls as on the host
        folder = Path(str(distribution.locate_file(""))).resolve()
        if folder.is_dir():  # an egg or a zip is no folder to bind (and the converter cannot import from one)
            folders.append(str(folder))
        queue += requirement_names(distribution.requires or [], holds)
    return tuple(dict.fromkeys(folders))


def forget_dependencies() -> None:
    """Forget the folders found (for tests, and after installing packages into a running process)."""
    dependency_folders.cache_clear()
