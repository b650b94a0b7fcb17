"""The public surface is one deliberate list, and the core needs no optional dependency."""

from __future__ import annotations

import subprocess
import sys

import rlm_adapters

EXPECTED = {
    "RLM",
    "BudgetEvent",
    "BudgetExceededError",
    "CancellationError",
    "CellExecuted",
    "ConfigurationError",
    "ContextError",
    "ErrorThresholdExceededError",
    "Event",
    "FinishReason",
    "LMClient",
    "LMResponse",
    "Limits",
    "Message",
    "MissingExtraError",
    "ModelError",
    "ModelUsage",
    "RLMError",
    "RLMLogger",
    "RLMResult",
    "RootCall",
    "RunFinished",
    "RunStarted",
    "SandboxError",
    "ScriptedModel",
    "SubCallFinished",
    "SubCallStarted",
    "TimeoutExceededError",
    "TokenLimitExceededError",
    "UsageSummary",
    "__version__",
    "read_trajectory",
    "register_backend",
    "register_price",
}

BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {BLOCKED}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
"""


def test_all_is_pinned() -> None:
    assert set(rlm_adapters.__all__) == EXPECTED
    for name in rlm_adapters.__all__:
        assert hasattr(rlm_adapters, name)


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
