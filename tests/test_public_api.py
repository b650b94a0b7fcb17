"""The public surface is one deliberate list, and the core needs no optional dependency."""

from __future__ import annotations

import inspect
import subprocess
import sys

import rlm_adapters
from rlm_adapters.core import events

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {BLOCKED}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
"""


def test_all_lists_exactly_the_public_names() -> None:
    """Derived, as httpx's exported-members test is: every public name the package binds is in `__all__`,
    sorted, and nothing else is (submodules excepted), so a new export cannot be forgotten or leak. Names load
    on first use (PEP 562): each one is used first, so that every name of `__all__` resolves."""
    for name in rlm_adapters.__all__:
        getattr(rlm_adapters, name)
    public = {
        name for name, value in vars(rlm_adapters).items() if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set(rlm_adapters.__all__) == public | {"__version__"}
    assert len(rlm_adapters.__all__) == len(set(rlm_adapters.__all__))


def test_every_event_of_the_stream_is_exported() -> None:
    """A callback sees every kind of event, so each class is public (`ConcurrencyCut` was once left out)."""
    kinds = {
        name
        for name, value in vars(events).items()
        if inspect.isclass(value) and issubclass(value, events.Event) and value.__module__ == events.__name__
    }
    assert "ConcurrencyCut" in kinds
    assert kinds <= set(rlm_adapters.__all__)


def test_core_imports_and_runs_without_optional_dependencies() -> None:
    blocked = {"langchain_core", "llama_index", "mcp", "docker", "e2b", "anthropic", "matplotlib"}
    code = BLOCKER.format(BLOCKED=blocked) + (
        "from rlm_adapters import RLM, ScriptedModel\n"
        "r = RLM(backend=ScriptedModel(['FINAL(ok)']), environment='local').completion('ctx', 'q')\n"
        "print(r.response)\n"
        "try:\n"
        "    RLM(backend='anthropic', backend_kwargs={'model_name': 'x', 'api_key': 'k'})\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "ok"
    assert 'pip install "rlm-adapters[anthropic]"' in lines[1]


def test_version_matches_the_package_metadata() -> None:
    from importlib.metadata import version

    assert rlm_adapters.__version__ == version("rlm-adapters")
