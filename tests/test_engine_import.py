"""``import rlm_adapters`` loads the engine, not the services beside it (document conversion, file loading,
cited sources).

What the source says the services import, and that ``core/`` imports none of them, is `tests/test_layers.py`
(rules (a) and (g)); this is what a fresh interpreter really loads."""

from __future__ import annotations

import json
import subprocess
import sys

# Loaded only by the adapters (and rlm ask) that read files or cite sources, never by the engine.
SERVICES = ("rlm_adapters.documents", "rlm_adapters.files", "rlm_adapters.sources")
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


# What a plain first call does not use, loaded where it is (issue 41: the engine's import at the first call).
DEFERRED = ("sqlite3", "rlm_adapters.core.cache.sqlite", "re2", "difflib", "statistics")


def test_a_plain_first_call_loads_no_cache_store_pattern_engine_or_statistics() -> None:
    modules = _modules_after(
        "from rlm_adapters import RLM, ScriptedModel\n"
        "RLM(backend=ScriptedModel(['```repl\\nprint(len(context))\\n```', 'FINAL(ok)'])).completion('ctx', 'q')"
    )
    assert "rlm_adapters.core.sandbox.subprocess.sandbox" in modules  # the default sandbox ran
    assert [m for m in modules if m in DEFERRED] == []


def test_each_deferred_module_loads_when_its_feature_is_used() -> None:
    modules = _modules_after(
        "import rlm_adapters, tempfile, os\n"
        "from rlm_adapters import RLM, ScriptedModel\n"
        "from rlm_adapters.core.cache import SQLiteCallCache\n"
        "from rlm_adapters.core.json_schema import pattern_matches\n"
        "from rlm_adapters.core.context import validate_context\n"
        "assert rlm_adapters.SQLiteCallCache is SQLiteCallCache\n"
        "assert pattern_matches('^a+$', 'aaa') and validate_context(['x', 'yy'])\n"
        "folder = tempfile.mkdtemp()\n"
        "RLM(backend=ScriptedModel(['FINAL(ok)']), environment='local', cache=os.path.join(folder, 'c.sqlite'))"
        ".completion('ctx', 'q')\n"
        "try:\n"
        "    RLM(backend='openai', backend_kwargs={'model_name': 'm', 'api_key': 'k', 'modle': 1})\n"
        "except Exception as exc:\n"
        "    assert 'did you mean' in str(exc), exc"
    )
    assert [m for m in DEFERRED if m not in modules] == []
