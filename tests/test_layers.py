"""The import contracts of docs/internals.md, read from the source of every module of the package.

Each import counts (`tests/import_graph.py`): top-level, inside a function (lazy), under
``if TYPE_CHECKING:``, relative, and a module named in a string (``importlib.import_module("...")``). The rules:

(a) `rlm_adapters.core` imports no adapter (LangChain, LlamaIndex, MCP), nor evals, the viewer, the CLI,
    the file loader, the document converter, the sources package or hosting: they stand on the core, not
    the other way round.
(b) Engine modules (`rlm_adapters.core` outside ``core/sandbox/`` and ``core/lm/``) reach those two layers
    only through their faces, `rlm_adapters.core.sandbox` and `rlm_adapters.core.lm`, and only names in
    the face's ``__all__``.
(c) No module under ``core/sandbox/`` imports the budget, a model client or the engine: only its own
    layer, the context it is handed (`core.context`), `core.units`, the errors, the extras helper and the lazy
    face's helper.
(d) The programs shipped into sandboxes (``core/sandbox/programs/``) import only the standard library; the
    worker package's modules import one another too, relatively only (inside a sandbox the package has
    another name, so an absolute import of a sibling would find nothing there).
(e) No import circle anywhere in the package (``from pkg import sub`` loads ``pkg``'s face too).
(f) No module imports its own package's face: children import their siblings directly.
(g) The services (``documents/``, ``files/``, ``sources/``, ``hosting/``) import only the engine, the errors, themselves
    and the services listed below them (the file loader converts documents).
(h) Each converter in ``documents/formats/`` runs as a lone file inside the converter's sandbox, where
    nothing of this package is importable: the standard library and its document libraries only (ours
    only for type checkers).
(i) `rlm serve` (``serve/``) is an adapter: it imports the engine, the errors, the services and the shared
    top-level helpers (`http_guard`, `model_flags`, `flags`, `_extras`), no other adapter; and no module imports it
    but its subcommand (``cli/serve.py``, which the CLI registers by name, loaded when ``rlm serve`` is parsed).
(j) Outside `rlm_adapters.core`, the core is reached only through its faces (`core`, `core.lm`,
    `core.sandbox`, `core.cache`, `core.tracing`), and only names in a face's ``__all__``; no such name is
    also a module of the face's package (once that module is loaded, the package attribute is the module, and
    the face's name is shadowed). Two modules may go deeper, each for one reason (`DEEPER`).
(k) The run loop (``core/engine/loop.py``, ``core/engine/level_sandbox.py``) does not import the persistent
    session: a session reaches a run level only as its `SandboxLease`, so the loop has one path for both.
(l) The engine (``core/engine/``) is a floor of its own: no other module of `core` imports it but those above it
    (`RLM` in ``rlm.py``, its attributes, the face). The options (``settings.py``), the caps (``budget_limits.py``),
    events, results and the layers stand below it, so no import runs back up into it.

Each rule is a function of a `Package`, run on the real one and, once, on a planted package that breaks it.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.core_shape import CORE_FACES
from tests.import_graph import PACKAGE, Package, circles, within

FACES = ("rlm_adapters.core.sandbox", "rlm_adapters.core.lm")
NOT_BELOW_CORE = ("langchain", "llama_index", "mcp_server", "serve", "evals", "viewer", "cli", "files", "documents",
                  "sources", "hosting")  # fmt: skip
SANDBOX_MAY_IMPORT = ("rlm_adapters.core.sandbox", "rlm_adapters.core.context", "rlm_adapters.core.units",
                      "rlm_adapters.errors", "rlm_adapters._extras", "rlm_adapters._lazy")  # fmt: skip
# Each service and the services it may use (documents stand on the core alone; the file loader converts them).
SERVICES: dict[str, tuple[str, ...]] = {"documents": (), "files": ("documents",), "sources": (), "hosting": ()}


def engine_modules(package: Package) -> list[Path]:
    core = package.root / "core"
    layers = (core / "sandbox", core / "lm")
    return [p for p in package.modules_under(core) if not any(p.is_relative_to(layer) for layer in layers)]


def core_violations(package: Package) -> list[str]:
    """Rule (a): imports from the core of a layer that stands on it."""
    above = tuple(f"rlm_adapters.{name}" for name in NOT_BELOW_CORE)
    return [
        f"{path.relative_to(package.root)}:{found.line}: {module}"
        for path in package.modules_under(package.root / "core")
        for found in package.imports_of(path)
        for module in [found.module, *(f"{found.module}.{name}" for name in found.names)]
        if any(within(module, name) for name in above)
    ]


def face_violations(path: Path, package: str | None = None, source: Package = PACKAGE) -> list[str]:
    """Rule (b) for one engine module: its imports of the two layers that do not go through a face's `__all__`."""
    bad: list[str] = []
    for found in source.imports_of(path, package):
        for face in FACES:
            if not within(found.module, face):
                continue
            exported = source.exported(face)
            if found.module != face or not found.names or not set(found.names) <= exported:
                names = f" ({', '.join(sorted(set(found.names) - exported))})" if found.names else ""
                bad.append(f"{path.name}:{found.line}: {found.module}{names}")
    return bad


def engine_violations(package: Package) -> list[str]:
    """Rule (b) for every engine module."""
    return [v for path in engine_modules(package) for v in face_violations(path, source=package)]


def sandbox_violations(package: Package) -> list[str]:
    """Rule (c): imports from the sandbox layer of anything of ours but what it may use."""
    return [
        f"{path.relative_to(package.root)}:{found.line}: {found.module}"
        for path in package.modules_under(package.root / "core" / "sandbox")
        for found in package.imports_of(path)
        if within(found.module, "rlm_adapters") and not any(within(found.module, ok) for ok in SANDBOX_MAY_IMPORT)
    ]


def program_violations(package: Package) -> list[str]:
    """Rule (d): imports from the shipped programs of anything but the standard library (and, in the worker
    package, of anything but its own modules, relatively)."""
    allowed = sys.stdlib_module_names | {"__future__"}
    worker = package.root / "core" / "sandbox" / "programs" / "worker"
    worker_name = package.module_name(worker / "__init__.py")
    return [
        f"{path.relative_to(package.root)}:{found.line}: {found.module or '.'}"
        for path in package.modules_under(package.root / "core" / "sandbox" / "programs")
        for found in package.imports_of(path)
        if found.module.partition(".")[0] not in allowed
        and not (found.level and path.is_relative_to(worker) and within(found.module, worker_name))
    ]


def circle_violations(package: Package) -> list[str]:
    """Rule (e): each import circle, as its modules."""
    return [" <-> ".join(group) for group in circles(package.graph)]


def own_face_violations(package: Package) -> list[str]:
    """Rule (f): modules that load their own package's face."""
    return [
        f"{name} imports {parent}"
        for name, targets in package.graph.items()
        if (parent := name.rpartition(".")[0]) and parent in targets
    ]


def service_violations(package: Package) -> list[str]:
    """Rule (g): imports from a service of anything but the engine, the errors and the service itself."""
    bad: list[str] = []
    for service, below in SERVICES.items():
        allowed = ("rlm_adapters.core", "rlm_adapters.errors", f"rlm_adapters.{service}")
        allowed += tuple(f"rlm_adapters.{name}" for name in below)
        for name, targets in package.graph.items():
            if within(name, f"rlm_adapters.{service}"):
                bad += [
                    f"{name} imports {target}"
                    for target in sorted(targets)
                    if not any(within(target, ok) for ok in allowed)
                ]
    return bad


def format_violations(package: Package) -> list[str]:
    """Rule (h): imports from a document format of anything but the standard library and document libraries."""
    from rlm_adapters.documents import FORMATS, TEXT

    libraries = {name for fmt in (*FORMATS.values(), TEXT) for name in (*fmt.libraries, *fmt.optional)}
    allowed = sys.stdlib_module_names | {"__future__", "striprtf"} | libraries
    bad: list[str] = []
    for path in package.modules_under(package.root / "documents" / "formats"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
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
    return bad


SERVE_MAY_IMPORT = ("rlm_adapters.core", "rlm_adapters.errors", "rlm_adapters.files", "rlm_adapters.documents",
                    "rlm_adapters.sources", "rlm_adapters.http_guard", "rlm_adapters.model_flags", "rlm_adapters.flags",
                    "rlm_adapters._extras", "rlm_adapters.serve", "rlm_adapters.hosting")  # fmt: skip


SERVE_COMMAND = "rlm_adapters.cli.serve"  # `rlm serve`: the one module that may load the app


def serve_violations(package: Package) -> list[str]:
    """Rule (i): what `serve/` imports beyond the engine, the errors, the services and shared helpers, and
    who imports `serve/`."""
    bad: list[str] = []
    for name, targets in package.graph.items():
        inside = within(name, "rlm_adapters.serve")
        for target in sorted(targets):
            if inside and within(target, "rlm_adapters") and not any(within(target, ok) for ok in SERVE_MAY_IMPORT):
                bad.append(f"{name} imports {target}")
            if not inside and name != SERVE_COMMAND and within(target, "rlm_adapters.serve"):
                bad.append(f"{name} imports {target}")
    return bad


# Modules outside the core allowed past its faces, and where to. `errors.py` stands below the core (every core
# module may raise its errors), so importing the face, which loads the engine, would be a circle: it names
# `RLMResult` (for an error's partial result) from its module. `rlm_adapters.testing`'s `reset_process_state`
# puts back each module's process state by the module's name, and only for modules already loaded: a face
# would load them.
DEEPER: dict[str, tuple[str, ...]] = {
    "rlm_adapters.errors": ("rlm_adapters.core.result",),
    "rlm_adapters.testing": ("rlm_adapters.core",),
}


def outside_face_violations(package: Package) -> list[str]:
    """Rule (j): imports from outside the core of anything but its faces' names, and faces' shadowed names."""
    bad: list[str] = []
    for name, path in package.files.items():
        if within(name, "rlm_adapters.core"):
            continue
        allowed = DEEPER.get(name, ())
        for found in package.imports_of(path):
            if not within(found.module, "rlm_adapters.core") or any(within(found.module, ok) for ok in allowed):
                continue
            if found.module not in CORE_FACES:
                bad.append(f"{name}:{found.line}: {found.module}")
            elif missing := set(found.names) - package.exported(found.module):
                bad.append(f"{name}:{found.line}: {found.module} ({', '.join(sorted(missing))})")
    for face in CORE_FACES:
        if face in package.files:
            bad += [
                f"{face} exports {n}, also a module" for n in package.exported(face) if package.is_module(f"{face}.{n}")
            ]
    return bad


LOOP_MODULES = ("rlm_adapters.core.engine.loop", "rlm_adapters.core.engine.level_sandbox")
SESSION_MODULES = ("rlm_adapters.core.engine.session", "rlm_adapters.core.engine.session_holder")


def loop_violations(package: Package) -> list[str]:
    """Rule (k): the loop's modules importing the session's."""
    return [
        f"{name} imports {target}"
        for name in LOOP_MODULES
        for target in sorted(package.graph.get(name, ()))
        if any(within(target, session) for session in SESSION_MODULES)
    ]


# What stands above the engine in `core`: `RLM` (`rlm.py`), its attributes, and the two faces that name them.
ABOVE_ENGINE = ("rlm_adapters.core", "rlm_adapters.core.adapter_kit", "rlm_adapters.core.rlm",
                "rlm_adapters.core.attributes")  # fmt: skip


def engine_floor_violations(package: Package) -> list[str]:
    """Rule (l): a module of `core` outside the engine (and below `RLM`) importing the engine."""
    return [
        f"{name} imports {target}"
        for name, targets in package.graph.items()
        if within(name, "rlm_adapters.core") and not within(name, "rlm_adapters.core.engine")
        and name not in ABOVE_ENGINE
        for target in sorted(targets)
        if within(target, "rlm_adapters.core.engine")
    ]  # fmt: skip


RULES: dict[str, Callable[[Package], list[str]]] = {
    "a": core_violations,
    "b": engine_violations,
    "c": sandbox_violations,
    "d": program_violations,
    "e": circle_violations,
    "f": own_face_violations,
    "g": service_violations,
    "h": format_violations,
    "i": serve_violations,
    "j": outside_face_violations,
    "k": loop_violations,
    "l": engine_floor_violations,
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_package_keeps_each_rule(rule: str) -> None:
    assert RULES[rule](PACKAGE) == []


def test_the_checks_see_the_package() -> None:
    """The rules above look at what they should: not an empty graph, nor a list of modules missing a layer."""
    names = {p.name for p in engine_modules(PACKAGE)}
    assert names >= {"loop.py", "broker.py", "tools.py", "session.py", "tree.py", "rlm.py"}
    programs = {p.name for p in PACKAGE.modules_under(PACKAGE.root / "core" / "sandbox" / "programs")}
    assert programs >= {"walls.py", "bootstrap.py", "__init__.py", "protocol.py", "repl.py", "program.py"}
    assert "converter.py" in programs
    graph = PACKAGE.graph
    assert len(graph) > 100
    assert "rlm_adapters.evals.arms.reference" in graph["rlm_adapters.evals.arms"]  # a face loads its children
    assert "rlm_adapters.core.sandbox.subprocess.bwrap" in graph["rlm_adapters.core.sandbox.subprocess.isolation"]
    assert any(within(target, "rlm_adapters.core") for target in graph["rlm_adapters.sources._citations"])


def test_each_face_lists_what_it_exports() -> None:
    for face in (*FACES, *CORE_FACES):
        module = importlib.import_module(face)
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert missing == []
        assert PACKAGE.exported(face) == set(module.__all__)  # what rule (b) reads is what runs


# A small package laid out like ours that keeps every rule; each case below plants one break into it.
CLEAN = {
    "__init__.py": "from rlm_adapters.core import RLM\n__all__ = ['RLM']\n",
    "errors.py": "class SandboxError(Exception): ...\n",
    "_extras.py": "",
    "core/__init__.py": (
        "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from rlm_adapters.core.rlm import RLM\n"
        "    from rlm_adapters.core.context import RunContext\n__all__ = ['RLM', 'RunContext']\n"
    ),
    "core/engine/budget.py": "",
    "core/context.py": "",
    "core/rlm.py": (
        "from rlm_adapters.core.sandbox import make_sandbox\n"
        "from rlm_adapters.core.lm import LMClient\n"
        "import rlm_adapters.core.engine.budget as budget\n"
    ),
    "core/lm/__init__.py": "from rlm_adapters.core.lm.base import LMClient\n__all__ = ['LMClient']\n",
    "core/lm/base.py": "import asyncio\n",
    "core/sandbox/__init__.py": (
        "from rlm_adapters.core.sandbox.factory import make_sandbox\n__all__ = ['make_sandbox']\n"
    ),
    "core/sandbox/factory.py": (
        "import importlib\n"
        "from rlm_adapters.core.context import RunContext\n"
        "from rlm_adapters.errors import SandboxError\n"
        "KINDS = {'local': 'rlm_adapters.core.sandbox.local'}\n"
        "def make_sandbox(kind):\n    return importlib.import_module(KINDS[kind])\n"
    ),
    "core/sandbox/local.py": "from rlm_adapters.core.sandbox.programs import worker\n",
    "core/sandbox/programs/__init__.py": "",
    "core/sandbox/programs/worker/__init__.py": "from .repl import Repl\n",
    "core/sandbox/programs/worker/repl.py": "import json\nimport sys\nfrom .text import cap\n",
    "core/sandbox/programs/worker/text.py": "",
    "files/__init__.py": "from rlm_adapters.files._walk import walk\n__all__ = ['walk']\n",
    "files/_walk.py": (
        "from rlm_adapters.errors import SandboxError\nfrom rlm_adapters.core import RunContext\n"
        "from rlm_adapters.documents import convert\n"
    ),
    "documents/__init__.py": "from rlm_adapters.documents._convert import convert\n__all__ = ['convert']\n",
    "documents/_convert.py": "from rlm_adapters.core import RunContext\ndef convert(): ...\n",
    "documents/formats/__init__.py": "",
    "documents/formats/_text.py": "import io\n",
    "documents/formats/pdf.py": (
        "import io\nTYPE_CHECKING = False\nif TYPE_CHECKING:\n    from rlm_adapters.documents.formats._text import T\n"
    ),
    "sources/__init__.py": "",
    "sources/_cite.py": "import logging\nlogger = logging.getLogger('rlm_adapters.langchain')\n",
    "langchain/__init__.py": "from rlm_adapters.files import walk\nfrom rlm_adapters.core import RLM\n",
    "http_guard.py": "import hmac\n",
    "core/engine/__init__.py": "",
    "core/engine/loop.py": "from rlm_adapters.core.engine.level_sandbox import SandboxLease\n",
    "core/engine/level_sandbox.py": "import asyncio\n",
    "core/engine/session.py": "",
    "serve/__init__.py": "",
    "serve/app.py": "from rlm_adapters.core import RLM\nfrom rlm_adapters.http_guard import is_loopback\n",
}

PLANTED = [
    ("a", "core/engine/budget.py", "def f():\n    from rlm_adapters.langchain import ChatRLM\n"),
    ("b", "core/engine/budget.py", "from rlm_adapters.core.sandbox.factory import make_sandbox\n"),
    ("c", "core/sandbox/local.py", "if TYPE_CHECKING:\n    from rlm_adapters.core.engine import budget\n"),
    ("d", "core/sandbox/programs/worker/repl.py", "import json\nfrom rlm_adapters.errors import SandboxError\n"),
    ("d", "core/sandbox/programs/worker/repl.py", "from rlm_adapters.core.sandbox.programs.worker.text import cap\n"),
    ("d", "core/sandbox/programs/worker/repl.py", "from .. import walls\n"),  # out of the worker package
    ("d", "core/sandbox/programs/bootstrap.py", "from .worker import repl\n"),  # a program run as a script
    ("e", "core/lm/base.py", "def later():\n    from rlm_adapters.core.rlm import RLM\n"),  # lazy
    ("e", "core/sandbox/factory.py", "from rlm_adapters.core.sandbox import local\n"),  # through the face
    ("e", "core/context.py", "import importlib\nimportlib.import_module('rlm_adapters.core.rlm')\n"),  # by name
    ("f", "core/rlm.py", "from rlm_adapters.core import context\n"),  # its own package's face
    ("f", "files/_walk.py", "from . import _glob\n"),
    ("g", "sources/_cite.py", "import importlib\nimportlib.import_module('rlm_adapters.langchain')\n"),
    ("g", "files/_walk.py", "from rlm_adapters import RLM\n"),
    ("g", "documents/_convert.py", "from rlm_adapters.files import walk\n"),  # below the file loader, not above
    ("h", "documents/formats/pdf.py", "import io\nfrom rlm_adapters.errors import SandboxError\n"),
    ("i", "serve/app.py", "from rlm_adapters.langchain import ChatRLM\n"),  # another adapter
    ("i", "langchain/__init__.py", "def f():\n    from rlm_adapters.serve import app\n"),  # serve is imported
    ("j", "langchain/__init__.py", "from rlm_adapters.core.rlm import RLM\n"),  # a module behind the face
    ("j", "serve/app.py", "from rlm_adapters.core import budget\n"),  # a module through the face's name
    ("j", "files/_walk.py", "def f():\n    from rlm_adapters.core.sandbox.local import x\n"),  # a layer's module
    ("j", "sources/_cite.py", "import importlib\nimportlib.import_module('rlm_adapters.core.engine.budget')\n"),  # by name  # noqa: E501
    ("j", "__init__.py", "from rlm_adapters.core.lm import LMClient, make_client\n"),  # not in the face's __all__
    ("j", "core/__init__.py", "__all__ = ['RLM', 'RunContext', 'context']\n"),  # a name a module shadows
    ("k", "core/engine/loop.py", "if TYPE_CHECKING:\n    from rlm_adapters.core.engine.session import Session\n"),
    ("l", "core/context.py", "def f():\n    from rlm_adapters.core.engine.loop import RunLevel\n"),
    ("k", "core/engine/level_sandbox.py", "def f():\n    from rlm_adapters.core.engine import session\n"),
]  # fmt: skip


def plant(tmp_path: Path, changes: dict[str, str]) -> Package:
    root = tmp_path / "rlm_adapters"
    for name, text in {**CLEAN, **changes}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return Package(root)


def test_the_planted_package_keeps_every_rule(tmp_path: Path) -> None:
    package = plant(tmp_path, {})
    assert {rule: check(package) for rule, check in RULES.items()} == {rule: [] for rule in RULES}


@pytest.mark.parametrize(("rule", "where", "text"), PLANTED)
def test_each_rule_fails_on_a_planted_break(tmp_path: Path, rule: str, where: str, text: str) -> None:
    package = plant(tmp_path, {where: text, "files/_glob.py": ""})
    found = RULES[rule](package)
    assert len(found) >= 1, f"rule ({rule}) missed {where}: {text!r}"


def test_a_circle_names_its_modules(tmp_path: Path) -> None:
    package = plant(tmp_path, {"core/sandbox/factory.py": "from rlm_adapters.core.sandbox import local\n"})
    assert circle_violations(package) == ["rlm_adapters.core.sandbox <-> rlm_adapters.core.sandbox.factory"]


def test_a_dotted_import_of_a_sibling_loads_no_face(tmp_path: Path) -> None:
    """The way round (f): ``import pkg.sub as sub`` loads the sibling only."""
    package = plant(tmp_path, {"core/sandbox/local.py": "import rlm_adapters.core.sandbox.programs.worker as w\n"})
    assert own_face_violations(package) == [] and circle_violations(package) == []


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
