"""``import rlm_adapters`` loads the engine, not the services beside it (document conversion, file
loading, cited sources), and the services sit between the engine and the adapters: they import the engine,
the errors and the services listed below them (the file loader converts documents), and nothing in
``core/`` imports them."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import rlm_adapters

PACKAGE = Path(rlm_adapters.__file__).parent

# Loaded only by the adapters (and rlm ask) that read files or cite sources, never by the engine.
SERVICES = ("rlm_adapters.documents", "rlm_adapters.files", "rlm_adapters.sources")
# The services each service may use (documents stand on the core alone; the file loader converts them).
BELOW = {"documents": (), "files": ("documents",), "sources": ()}
GONE = ("rlm_adapters.core.citations", "rlm_adapters.core.provenance", "rlm_adapters.core.files")


def _modules_after(code: str) -> list[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    modules: list[str] = json.loads(done.stdout)
    return modules


def test_importing_the_package_and_running_a_result_loads_no_service() -> None:
    modules = _modules_after(
        "import rlm_adapters\n"
        "from rlm_adapters import RLM, ScriptedModel\n"
        "RLM(backend=ScriptedModel(['FINAL(ok)']), environment='local').completion('ctx', 'q')"
    )
    assert "rlm_adapters.core.result" in modules  # the check sees the engine's modules
    loaded = [m for m in modules if m.startswith(SERVICES) or m in GONE]
    assert loaded == []


def test_the_services_load_when_an_adapter_asks_for_them() -> None:
    modules = _modules_after("import rlm_adapters.sources, rlm_adapters.files")
    assert {"rlm_adapters.sources._citations", "rlm_adapters.files._walk", "rlm_adapters.documents._convert"} <= set(
        modules
    )


def _imports(folder: Path) -> set[tuple[str, str]]:
    """``(module file, imported rlm_adapters module)`` for every absolute import under `folder`."""
    found: set[tuple[str, str]] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            found |= {(str(path.relative_to(PACKAGE)), name) for name in names if name.startswith("rlm_adapters")}
    return found


def test_the_services_import_only_the_engine_the_errors_and_themselves() -> None:
    for service, below in BELOW.items():
        allowed = ("rlm_adapters.core.", "rlm_adapters.errors", f"rlm_adapters.{service}")
        allowed += tuple(f"rlm_adapters.{name}" for name in below)
        outside = {(where, name) for where, name in _imports(PACKAGE / service) if not name.startswith(allowed)}
        assert outside == set(), f"rlm_adapters.{service} reaches above the engine"
    assert [name for _, name in _imports(PACKAGE / "sources")]  # the scan sees imports at all


def test_the_engine_imports_no_service() -> None:
    engine = _imports(PACKAGE / "core")
    assert engine, "the scan found no import in core/"
    assert {(where, name) for where, name in engine if name.startswith(SERVICES)} == set()
