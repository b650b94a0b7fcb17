"""No import circle inside `rlm_adapters.evals`, counting every import: lazy, type-only and package faces."""

import ast
from pathlib import Path

import rlm_adapters

PACKAGE = Path(rlm_adapters.__file__).parent


def import_graph(root: Path, prefix: str) -> dict[str, set[str]]:
    """Module -> the modules under `root` it imports anywhere in its source (`from a import b` reaches `a`
    and, when it is a module, `a.b`)."""
    files = {}
    for path in root.rglob("*.py"):
        name = ".".join([prefix, *path.relative_to(root).with_suffix("").parts])
        files[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others, and itself."""
    reach, todo = {start}, [start]
    while todo:
        for target in graph[todo.pop()] - reach:
            reach.add(target)
            todo.append(target)
    return reach


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of two or more modules that each import one another, directly or not."""
    groups: list[set[str]] = []
    for start in graph:
        if not any(start in group for group in groups):
            group = {name for name in reachable(graph, start) if start in reachable(graph, name)}
            if len(group) > 1:
                groups.append(group)
    return groups


def test_evals_has_no_import_circle():
    graph = import_graph(PACKAGE / "evals", "rlm_adapters.evals")
    assert len(graph) > 15 and "rlm_adapters.evals.arms.reference" in graph["rlm_adapters.evals.arms"]
    assert circles(graph) == []


def test_no_evals_module_imports_its_own_packages_face():
    graph = import_graph(PACKAGE / "evals", "rlm_adapters.evals")
    for name, targets in graph.items():
        package = name.rpartition(".")[0]
        assert package not in targets, f"{name} imports its own package's face {package}"


def test_the_check_finds_a_lazy_circle_and_a_face_circle(tmp_path):
    (tmp_path / "__init__.py").write_text("from pkg.b import run\n")
    (tmp_path / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import f\n")
    (tmp_path / "c.py").write_text("from pkg import run\n")
    (tmp_path / "d.py").write_text("from . import c\n")
    found = circles(import_graph(tmp_path, "pkg"))
    assert sorted(sorted(group) for group in found) == [["pkg.a", "pkg.b"]]
    (tmp_path / "b.py").write_text("from pkg import d\n")
    assert {"pkg", "pkg.b", "pkg.c", "pkg.d"} <= set().union(*circles(import_graph(tmp_path, "pkg")))
