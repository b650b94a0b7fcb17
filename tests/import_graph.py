"""The imports of a package read from its source: the one parser behind the import-contract tests.

Every import counts: top-level, inside a function (lazy), under ``if TYPE_CHECKING:``, relative, and a
module of the package named in a string (``importlib.import_module("...")``, a registry's table). A
``from pkg import sub`` reads from ``pkg``'s ``__init__`` (its face), so it counts as importing ``pkg`` too,
as at runtime; a dotted ``import a.b.c`` counts ``a.b.c``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# A dotted name of the package inside a string: what `importlib.import_module` and registries are given
# (counted when it names a module that exists).
NAMED_MODULE = r"\b{name}(?:\.\w+)+"
# Calls that load the module whose name they are given; other strings naming a module (a logger's name,
# ``-m`` in a command line, a ``sys.modules`` lookup, a resource anchor) load nothing.
LOADERS = ("import_module", "__import__")


@dataclass(frozen=True)
class Import:
    """One import found in a module.

    Attributes:
        module: The module imported (for ``from m import a, b``: ``m``).
        names: For ``from m import a, b``, the names taken.
        line: Where it is.
        loads: Whether this line loads the module (a statement, or a string handed to a loader), rather than
            only naming it (a registry's table, loaded elsewhere).
        level: How many dots a relative import starts with (0: an absolute one).
    """

    module: str
    names: tuple[str, ...]
    line: int
    loads: bool = True
    level: int = 0


def within(module: str, prefix: str) -> bool:
    """Whether `module` is `prefix` or inside it."""
    return module == prefix or module.startswith(prefix + ".")


class Package:
    """The source of one package: its modules, each one's imports, and the graph they make.

    Args:
        root: The package's folder (the one holding its ``__init__.py``).
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = root.name
        self._named = re.compile(NAMED_MODULE.format(name=re.escape(self.name)))

    @cached_property
    def files(self) -> dict[str, Path]:
        """Module name -> its file, for every module and package under the root."""
        found = {self.module_name(path): path for path in sorted(self.root.rglob("*.py"))}
        assert found, f"no module under {self.root}"
        return found

    def module_name(self, path: Path) -> str:
        """The dotted name of a module of the package from its path."""
        parts = path.relative_to(self.root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def package_of(self, path: Path) -> str:
        """The package a module belongs to (what its relative imports start from)."""
        name = self.module_name(path)
        return name if path.name == "__init__.py" else name.rpartition(".")[0]

    def is_module(self, name: str) -> bool:
        """Whether a dotted name is a module or package of this one (a logger's name, say, is not)."""
        return name in self.files

    def modules_under(self, folder: Path) -> list[Path]:
        """The module files under `folder` (a part of the package), sorted."""
        found = [path for path in self.files.values() if path.is_relative_to(folder)]
        assert found, f"no module under {folder}"
        return found

    def imports_of(self, path: Path, package: str | None = None) -> list[Import]:
        """Every import in `path`, at any depth, relative ones resolved, and every module named in a string.

        Args:
            path: The module's file.
            package: Its package (default: from where the file is in the package).
        """
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = self.package_of(path) if package is None else package
        # Prose (docstrings, bare string statements) names modules too: only strings that code uses count.
        prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
        loaded = {
            id(node.args[0])
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and node.args and _called(node.func) in LOADERS
        }
        found: list[Import] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [Import(alias.name, (), node.lineno) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                found.append(Import(base, tuple(alias.name for alias in node.names), node.lineno, level=node.level))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                found += [
                    Import(name, (), node.lineno, loads=id(node) in loaded)
                    for name in self._named.findall(node.value)
                    if self.is_module(name)
                ]
        return found

    def reached(self, found: Import) -> set[str]:
        """The modules of the package one import runs: the module (or the nearest package holding it), and for
        ``from m import a`` each ``m.a`` that is a module."""
        targets = {found.module, *(f"{found.module}.{name}" for name in found.names)}
        reached: set[str] = set()
        for target in targets:
            while target and target not in self.files:
                target = target.rpartition(".")[0]
            if target:
                reached.add(target)
        return reached

    @cached_property
    def graph(self) -> dict[str, set[str]]:
        """Module -> the modules of the package it loads, anywhere in its source."""
        return {
            name: {
                target
                for found in self.imports_of(path)
                if found.loads
                for target in self.reached(found)
                if target != name
            }
            for name, path in self.files.items()
        }

    def exported(self, face: str) -> set[str]:
        """The names a package's face lists in its ``__all__`` (read from the source, not imported)."""
        tree = ast.parse(self.files[face].read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
            ):
                names: list[str] = ast.literal_eval(node.value)
                return set(names)
        return set()


def _called(func: ast.expr) -> str:
    """The last name of what a call calls (``importlib.import_module`` -> ``import_module``)."""
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of two or more modules that each load one another, directly or not (sorted)."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = {start}, [start]
        while todo:
            for target in graph[todo.pop()] - seen:
                seen.add(target)
                todo.append(target)
        reach[start] = seen
    groups: list[list[str]] = []
    for start in sorted(graph):
        if not any(start in group for group in groups):
            group = sorted(name for name in reach[start] if start in reach[name])
            if len(group) > 1:
                groups.append(group)
    return groups


PACKAGE = Package(REPO / "rlm_adapters")
