"""The sandbox layer stands on its own: its handler contract needs no budget, loading one kind loads no other,
and a name means one thing (the import contracts of the whole package are in tests/test_layers.py)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.engine.budget import BudgetExhausted
from rlm_adapters.core.sandbox.base import BudgetSpent, SandboxSetup
from rlm_adapters.core.sandbox.local import LocalSandbox
from tests.core.sandbox.helpers import start

ROOT = Path(__file__).resolve().parents[3]
SANDBOX_DIR = ROOT / "rlm_adapters" / "core" / "sandbox"
# Each is imported in order; after each, whether the subprocess sandbox's spare pool was loaded with it.
POOL_PROBE = """
import importlib, json, sys
loaded = {}
for kind in sys.argv[1:]:
    importlib.import_module('rlm_adapters.core.sandbox.' + kind)
    loaded[kind] = "rlm_adapters.core.sandbox.subprocess.spares" in sys.modules
print(json.dumps(loaded))
"""


def _defined_names(path: Path) -> set[str]:
    """The names a module defines at its top level (classes, functions, constants)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names - {"logger", "__all__", "TYPE_CHECKING"}


def test_no_two_things_in_the_sandbox_layer_share_a_name() -> None:
    """A name means one thing (there were two REAPERs, two SCRATCHes): modules and what they define."""
    modules = sorted(SANDBOX_DIR.rglob("*.py"))
    stems = [p.stem for p in modules if p.stem != "__init__"]
    assert sorted(stem for stem in set(stems) if stems.count(stem) > 1) == []
    owners: dict[str, list[str]] = {}
    for path in modules:
        for name in _defined_names(path):
            owners.setdefault(name, []).append(str(path.relative_to(SANDBOX_DIR)))
    assert {name: where for name, where in owners.items() if len(where) > 1} == {}


def _pool_loaded_by(*kinds: str) -> dict[str, bool]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", POOL_PROBE, *kinds], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    loaded: dict[str, bool] = json.loads(done.stdout)
    return loaded


def test_loading_a_container_or_cloud_sandbox_starts_no_spare_pool() -> None:
    """They ship the worker elsewhere: the subprocess pool (and its exit hook) has no business in their process."""
    kinds = ("docker", "cloud.e2b", "cloud.remote", "cloud.modal", "cloud.prime", "cloud.daytona")
    assert _pool_loaded_by(*kinds) == dict.fromkeys(kinds, False)
    assert _pool_loaded_by("subprocess.sandbox") == {
        "subprocess.sandbox": True
    }  # the probe does see the pool when it is loaded


def test_the_engines_budget_error_is_the_contracts() -> None:
    assert issubclass(BudgetExhausted, BudgetSpent)


async def _spent(kind: str, args: dict[str, Any]) -> Any:
    raise BudgetSpent("the run's budget is spent")


async def test_local_sandbox_turns_budget_spent_into_the_model_codes_error(tmp_path: Path) -> None:
    sandbox = LocalSandbox(cell_timeout=5.0)
    await sandbox.start(SandboxSetup(validate_context("ctx"), _spent, scratch=tmp_path))
    try:
        result = await sandbox.execute("llm_query('x')", 5.0)
    finally:
        await sandbox.aclose()
    assert result.error is not None
    assert "BudgetExhaustedError" in result.error
    assert "the run's budget is spent" in result.error


@pytest.mark.timeout(60)
async def test_subprocess_sandbox_turns_budget_spent_into_the_model_codes_error(tmp_path: Path) -> None:
    sandbox = await start(tmp_path, handler=_spent)
    try:
        result = await sandbox.execute("llm_query('x')", 20.0)
    finally:
        await sandbox.aclose()
    assert result.error is not None
    assert "BudgetExhaustedError" in result.error
    assert "the run's budget is spent" in result.error
