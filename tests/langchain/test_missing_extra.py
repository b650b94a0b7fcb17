"""Without langchain-core, the core still imports and the adapter names the extra to install."""

from __future__ import annotations

import subprocess
import sys

BLOCKER = """
import importlib.abc, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "langchain_core" or name.startswith("langchain_core."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
"""

CHECK = """
import rlm_adapters
from rlm_adapters import RLM
from rlm_adapters.errors import MissingExtraError
for module in ("rlm_adapters.langchain",):
    try:
        __import__(module)
    except MissingExtraError as exc:
        print(module, "->", exc)
    else:
        raise SystemExit(module + " imported without langchain-core")
print("langchain_core loaded:", "langchain_core" in sys.modules)
"""


def test_missing_langchain_core_names_the_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BLOCKER + CHECK], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("rlm_adapters.langchain -> ChatRLM needs") and "rlm-adapters[langchain]" in lines[0]
    assert lines[1] == "langchain_core loaded: False"
