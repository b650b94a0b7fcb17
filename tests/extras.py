"""What the tests need beyond the core install, and the words for a skip when it is missing.

Two ways, one vocabulary: `NEEDS_EXTRA` lists the test folders and modules that import an optional
dependency when they are collected (`tests/conftest.py` skips each as a whole when one is missing, before
importing it); `needs(module, extra)` marks one test that needs it when it runs. Either way the module is
really imported to decide, since a dependency of it may be what is missing. Both skip with a reason
naming the extra: ``pip install "rlm-adapters[EXTRA]"``.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Every optional dependency a test imports, as if none was installed: the extras, and dev's libraries (not its
# pytest plugins, which pytest itself loads before any test).
OPTIONAL = (
    "anthropic", "azure.identity", "boto3", "botocore", "daytona", "dateutil", "docker", "e2b", "google.genai",
    "langchain", "langchain_core", "langchain_tests", "langgraph", "litellm", "llama_index", "matplotlib", "mcp",
    "jsonschema", "modal", "numpy", "opentelemetry", "playwright", "prime_sandboxes", "psycopg", "psycopg_pool", "rlms",
    "starlette", "tiktoken", "uvicorn", "wonderwords",
)  # fmt: skip
# What ``pip install -e .`` (the README's line for trying it) leaves out beside those: the documents extra's
# readers (a PDF is then skipped, naming the extra).
NOT_IN_THE_CORE = (*OPTIONAL, "pypdfium2", "docx", "pptx", "openpyxl", "striprtf", "defusedxml")

# Paths relative to tests/ -> (the import it needs to be collected, the extra that brings it), for each
# folder whose conftest, or module whose top, imports an optional dependency.
NEEDS_EXTRA: dict[str, tuple[tuple[str, str], ...]] = {
    "benchmarks/test_runs_store_bench.py": (("psycopg", "store"), ("psycopg_pool", "store"), ("mcp", "mcp")),
    "benchmarks/test_store_bench.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "benchmarks/test_keys_bench.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "cli/test_keys.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "mcp_server/test_keys.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "serve/test_keys.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "benchmarks/test_streaming_bench.py": (("langchain_core", "langchain"),),
    "core/cache/test_postgres.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "core/sandbox/cloud/test_fakes.py": (
        ("e2b.sandbox_async.commands.command", "e2b"),
        ("modal.sandbox", "modal"),
        ("daytona._async.daytona", "daytona"),
        ("prime_sandboxes", "prime"),
    ),
    "evals/test_eval_oolong.py": (("numpy", "eval"),),
    "issues/test_48_credentials_in_errors.py": (("starlette", "serve"), ("uvicorn", "serve"), ("mcp", "mcp")),
    "issues/test_48_loop_stall.py": (("starlette", "serve"), ("uvicorn", "serve"), ("mcp", "mcp")),
    "issues/test_48_malformed_numbers.py": (("starlette", "serve"), ("uvicorn", "serve")),
    "issues/test_48_request_memory.py": (("starlette", "serve"), ("uvicorn", "serve")),
    "issues/test_48_schema_fanout.py": (("starlette", "serve"), ("uvicorn", "serve"), ("mcp", "mcp")),
    "issues/test_48_token_sources.py": (("mcp", "mcp"),),
    "langchain": (("langchain_core", "langchain"), ("pytest_socket", "dev")),
    "langchain/test_standard.py": (("langchain_tests", "dev"),),
    "llama_index": (("llama_index.core", "llama-index"),),
    "mcp_server": (("mcp", "mcp"),),
    "mcp_server/test_shared_store.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "plugin/test_claude_plugin.py": (("mcp", "mcp"),),
    "plugin/test_recall_claude.py": (("mcp", "mcp"),),
    "plugin/test_transcripts_claude.py": (("mcp", "mcp"),),
    "security/test_mcp_principals.py": (("mcp", "mcp"),),
    "security/test_runs_store.py": (("mcp", "mcp"),),
    "serve": (("starlette", "serve"), ("uvicorn", "serve")),
    "serve/test_store.py": (("psycopg", "store"), ("psycopg_pool", "store")),
    "test_flags.py": (("starlette", "serve"), ("uvicorn", "serve"), ("mcp", "mcp")),
}


def install_hint(extra: str) -> str:
    return f'pip install "rlm-adapters[{extra}]"'


@functools.cache
def unimportable(module: str) -> str | None:
    """The module that stops `module` from importing here (itself, or a dependency of it), or None.

    It is imported for real: the tests that need it are about to import it anyway.
    """
    if module.partition(".")[0] == "litellm":  # as core/lm/litellm_client.py does: no price fetch at import
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return getattr(exc, "name", None) or module
    return None


def missing_for(path: str) -> dict[str, str]:
    """Skip reason -> extra, for what one entry of `NEEDS_EXTRA` needs and cannot import here."""
    reasons: dict[str, str] = {}
    for module, extra in NEEDS_EXTRA.get(path, ()):
        if (missing := unimportable(module)) is not None:
            which = "" if module == missing or module.startswith(missing + ".") else f", which cannot import {missing}"
            reasons[f"needs {module}{which} ({install_hint(extra)})"] = extra
    return reasons


def installed(module: str) -> bool:
    """True when `module` imports here (a dependency of it may be what is missing, which `find_spec` misses)."""
    return unimportable(module) is None


def needs(module: str, extra: str) -> pytest.MarkDecorator:
    """Skip unless `module` is installed; the reason names the extra that brings it."""
    return pytest.mark.skipif(not installed(module), reason=f"needs {module} ({install_hint(extra)})")


# Run first by every Python started with `hiding_env`: each hidden module is None in `sys.modules`, so that
# importing it fails and `find_spec` answers None, as when it was never installed.
SITECUSTOMIZE = """
import os, sys
for name in os.environ.get("RLM_TEST_HIDDEN_MODULES", "").split(","):
    if name:
        sys.modules[name] = None
"""


def hiding_env(folder: Path, modules: Iterable[str]) -> dict[str, str]:
    """An environment for a subprocess in which `modules` (and what is inside them) look uninstalled.

    Args:
        folder: Where to write the ``sitecustomize.py`` that hides them (put first on ``PYTHONPATH``).
        modules: Dotted names, e.g. ``langchain_core`` or ``google.genai``.
    """
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(folder), str(REPO), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, "RLM_TEST_HIDDEN_MODULES": ",".join(modules)}
