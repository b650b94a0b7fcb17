"""What starting up imports (issue 30): the package, ``rlm --help`` and ``rlm-mcp`` load nothing they do not use.

Not timed (this machine's speed is not the code's): each case runs in a fresh interpreter and names the
modules it must not have loaded. A heavy import put back at the top of a module the start-up path reads
fails here with the names it pulled in; `benchmarks/startup_bench.py` measures the times.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# SDKs, web and model frameworks, the sandbox launcher, the console: what the first moments of a start need none of.
SDKS = ("openai", "anthropic", "httpx", "httpx2", "google.genai", "boto3", "litellm", "docker", "e2b", "modal")
FRAMEWORKS = ("pydantic", "langchain_core", "llama_index", "mcp", "mcp_types", "matplotlib")
CONSOLE = ("rich", "pygments")
ENGINE = (
    "rlm_adapters.core.rlm",
    "rlm_adapters.core.engine.run",
    "rlm_adapters.core.engine.loop",
    "rlm_adapters.core.engine.broker",
)
LAUNCHER = ("rlm_adapters.core.sandbox", "rlm_adapters.core.sandbox.subprocess")

REPORT = "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"


def loaded_by(code: str) -> set[str]:
    """The modules a fresh interpreter has loaded after running `code`."""
    done = subprocess.run(
        [sys.executable, "-c", code + REPORT], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def pulled_in(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden packages (or any of their submodules) among `modules`."""
    return sorted(name for name in forbidden if any(m == name or m.startswith(name + ".") for m in modules))


def test_import_rlm_adapters_loads_only_the_errors() -> None:
    modules = loaded_by("import rlm_adapters")
    ours = sorted(m for m in modules if m.startswith("rlm_adapters"))
    # The errors, and the lazy names' helper (the standard library's importlib and sys only).
    assert ours == ["rlm_adapters", "rlm_adapters._lazy", "rlm_adapters.errors"]
    assert pulled_in(modules, (*SDKS, *FRAMEWORKS, *CONSOLE, "asyncio")) == []


def test_every_public_name_still_loads_on_use() -> None:
    modules = loaded_by("import rlm_adapters\nfor name in rlm_adapters.__all__:\n    getattr(rlm_adapters, name)")
    assert "rlm_adapters.core.rlm" in modules  # the names resolve: the laziness hides nothing
    assert pulled_in(modules, (*SDKS, *FRAMEWORKS, *CONSOLE)) == []  # the engine itself needs none of these


def test_rlm_help_loads_no_subcommand() -> None:
    code = "from rlm_adapters.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    modules = loaded_by(code)
    assert pulled_in(modules, (*SDKS, *FRAMEWORKS, *CONSOLE, *ENGINE, *LAUNCHER, "asyncio")) == []
    subcommands = ("rlm_adapters.cli.ask", "rlm_adapters.viewer", "rlm_adapters.evals", "rlm_adapters.cli.doctor")
    assert pulled_in(modules, subcommands) == []


def test_a_subcommand_loads_its_own_module_only() -> None:
    code = "from rlm_adapters.cli import main\ntry:\n    main(['view', '--help'])\nexcept SystemExit:\n    pass"
    modules = loaded_by(code)
    assert "rlm_adapters.cli.view" in modules
    assert pulled_in(modules, ("rlm_adapters.evals", "rlm_adapters.cli.doctor", *ENGINE, *SDKS)) == []


def test_rlm_mcp_starts_without_the_engine_or_a_model_sdk() -> None:
    pytest.importorskip("mcp", reason="needs the mcp extra (the MCP SDK)")
    modules = loaded_by("import rlm_adapters.mcp_server.__main__")
    # The engine, the model SDKs and the sandbox launcher load at the first rlm_query, not at start-up.
    forbidden = (*ENGINE, "rlm_adapters.core.sandbox.subprocess", "openai", "anthropic", "langchain_core")
    assert pulled_in(modules, (*forbidden, "llama_index", "docker", "e2b", "modal", *CONSOLE)) == []
