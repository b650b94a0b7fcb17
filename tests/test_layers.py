"""The import contracts of docs/internals.md, read from the source of every module of the package.

Each import counts: top-level, inside a function (lazy), under ``if TYPE_CHECKING:``, relative, and a
module named in a string (``importlib.import_module("...")``). The rules:

(a) `rlm_adapters.core` imports no adapter (LangChain, LlamaIndex, MCP), nor evals, the viewer, the CLI,
    the file loader, the document converter or the sources package: they stand on the core, not the other
    way round.
(b) Engine modules (`rlm_adapters.core` outside ``core/sandbox/`` and ``core/lm/``) reach those two layers
    only through their faces, `rlm_adapters.core.sandbox` and `rlm_adapters.core.lm`, and only names in
    the face's ``__all__``.
(c) No module under ``core/sandbox/`` imports the budget, a model client or the engine: only its own
    layer, the context it is handed (`core.context`), `core.units`, the errors and the extras helper.
(d) The programs shipped into sandboxes (``core/sandbox/programs/``) import only the standard library.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rlm_adapters"
CORE = PACKAGE / "core"
SANDBOX = CORE / "sandbox"
LM = CORE / "lm"
FACES = ("rlm_adapters.core.sandbox", "rlm_adapters.core.lm")
NOT_BELOW_CORE = ("langchain", "llama_index", "mcp_server", "evals", "viewer", "cli", "files", "documents", "sources")
SANDBOX_MAY_IMPORT = ("rlm_adapters.core.sandbox", "rlm_adapters.core.context", "rlm_adapters.core.units",
                      "rlm_adapters.errors", "rlm_adapters._extras")  # fmt: skip
# A dotted name of this package inside a string: what `importlib.import_module` and registries are given
# (counted when it names a module that exists).
NAMED_MODULE = re.compile(r"\brlm_adapters(?:\.\w+)+")


@dataclass(frozen=True)
class Import:
    """One import found in a module: the module imported and, for ``from m import a, b``, the names."""

    module: str
    names: tuple[str, ...]
    line: int


def is_module(name: str) -> bool:
    """Whether a dotted name is a module or package of ours (a logger's name, say, is not)."""
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def module_name(path: Path) -> str:
    """The dotted name of a module of the package from its path."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    """The package a module of ours belongs to (what its relative imports start from)."""
    return module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]


def imports_of(path: Path, package: str | None = None) -> list[Import]:
    """Every import in `path`, at any depth, relative ones resolved, and every module named in a string.

    Args:
        path: The module's file.
        package: Its package (default: from where the file is in the package).
    """
    tree = ast.parse(path.read_text(), str(path))
    package = package_of(path) if package is None else package
    # Prose (docstrings, bare string statements) names modules too: only strings that code uses count.
    prose = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
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
            found.append(Import(base, tuple(alias.name for alias in node.names), node.lineno))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            found += [Import(name, (), node.lineno) for name in NAMED_MODULE.findall(node.value) if is_module(name)]
    return found


def modules_under(folder: Path) -> list[Path]:
    found = sorted(folder.rglob("*.py"))
    assert found, f"no module under {folder}"
    return found


def within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def engine_modules() -> list[Path]:
    return [p for p in modules_under(CORE) if not (p.is_relative_to(SANDBOX) or p.is_relative_to(LM))]


def face_violations(path: Path, package: str | None = None) -> list[str]:
    """Rule (b) for one engine module: its imports of the two layers that do not go through a face's `__all__`."""
    bad: list[str] = []
    for found in imports_of(path, package):
        for face in FACES:
            if not within(found.module, face):
                continue
            exported = set(importlib.import_module(face).__all__)
            if found.module != face or not found.names or not set(found.names) <= exported:
                names = f" ({', '.join(sorted(set(found.names) - exported))})" if found.names else ""
                bad.append(f"{path.name}:{found.line}: {found.module}{names}")
    return bad


def test_the_core_imports_no_layer_above_it() -> None:
    above = tuple(f"rlm_adapters.{name}" for name in NOT_BELOW_CORE)
    bad = [
        f"{path.relative_to(PACKAGE)}:{found.line}: {module}"
        for path in modules_under(CORE)
        for found in imports_of(path)
        for module in [found.module, *(f"{found.module}.{name}" for name in found.names)]
        if any(within(module, name) for name in above)
    ]
    assert bad == []


def test_the_engine_reaches_the_sandbox_and_model_layers_only_through_their_faces() -> None:
    engine = engine_modules()
    assert {p.name for p in engine} >= {"loop.py", "broker.py", "tools.py", "session.py", "tree.py", "rlm.py"}
    assert [v for path in engine for v in face_violations(path)] == []


def test_each_face_lists_what_it_exports() -> None:
    for face in FACES:
        module = importlib.import_module(face)
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == []


def test_no_sandbox_module_imports_the_budget_a_model_client_or_the_engine() -> None:
    bad = [
        f"{path.relative_to(PACKAGE)}:{found.line}: {found.module}"
        for path in modules_under(SANDBOX)
        for found in imports_of(path)
        if within(found.module, "rlm_adapters") and not any(within(found.module, ok) for ok in SANDBOX_MAY_IMPORT)
    ]
    assert bad == []


def test_the_shipped_programs_import_only_the_standard_library() -> None:
    allowed = sys.stdlib_module_names | {"__future__"}
    programs = modules_under(SANDBOX / "programs")
    assert {p.name for p in programs} >= {"worker.py", "walls.py", "bootstrap.py", "converter.py"}
    bad = [
        f"{path.relative_to(PACKAGE)}:{found.line}: {found.module or '.'}"
        for path in programs
        for found in imports_of(path)
        if found.module.partition(".")[0] not in allowed
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from rlm_adapters.core.sandbox.factory import make_sandbox\n", True),
        ("def f():\n    from rlm_adapters.core.lm.limiter import run_call\n", True),
        ("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from rlm_adapters.core.lm.base import LMClient\n", True),
        ("from rlm_adapters.core.sandbox import programs\n", True),  # a submodule through the face's name
        ("from .sandbox.programs import worker\n", True),
        ("import importlib\nimportlib.import_module('rlm_adapters.core.sandbox.local')\n", True),
        ("from rlm_adapters.core.sandbox import make_sandbox, CellResult\n", False),
        ("from rlm_adapters.core.lm import LMClient\n", False),
    ],
)
def test_the_face_rule_catches_every_way_round_it(tmp_path: Path, source: str, caught: bool) -> None:
    """The checker itself: each spelling of an import into the layers' internals is found (and a face's is not)."""
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert bool(face_violations(path, package="rlm_adapters.core")) is caught


def test_the_document_formats_run_as_lone_files() -> None:
    """(e) Each converter in ``documents/formats/`` is loaded by path inside the converter's sandbox, where
    nothing of this package is importable: it imports the standard library and its document libraries,
    and ours only for type checkers."""
    from rlm_adapters.documents import FORMATS

    libraries = {name for fmt in FORMATS.values() for name in fmt.libraries}
    allowed = sys.stdlib_module_names | {"__future__"} | libraries | {"striprtf"}
    folder = PACKAGE / "documents" / "formats"
    bad: list[str] = []
    for path in modules_under(folder):
        tree = ast.parse(path.read_text())
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
            bad += [f"{path.name}:{node.lineno}: {n}" for n in names if n.partition(".")[0] not in allowed]
    assert bad == []
