"""The programs the sandboxes ship, standard library only, and where they are.

- `worker/`: the REPL worker every out-of-process sandbox runs, a package of modules with one job each
  (the ``local`` sandbox imports its `Repl`).
- `walls.py`: the walls the worker raises around itself under the subprocess launcher (and its probe).
- `bootstrap.py`: what Docker and the cloud sandboxes start first: it receives the worker's sources and the
  context over stdin, writes the context into the scratch folder and runs the worker (see `shipping`).
- `converter.py`: converts one document to text behind the same walls, once per document
  (`subprocess/oneshot.py` starts it; `rlm_adapters.documents` asks it).

Each is copied, bound or sent into a sandbox as-is, so none imports anything outside the standard library
(the worker's modules import one another, relatively), and this module (which the launchers import for
the paths) imports none of them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "BOOTSTRAP_PATH",
    "CONVERTER_PATH",
    "FOLDER",
    "WALLS_PATH",
    "WORKER_FOLDER",
    "WORKER_LOADER",
    "WORKER_MODULES",
    "WORKER_PACKAGE",
    "sandbox_env",
    "worker_files",
    "worker_sources",
]

FOLDER = Path(__file__).resolve().parent
WORKER_FOLDER = FOLDER / "worker"
WALLS_PATH = FOLDER / "walls.py"
BOOTSTRAP_PATH = FOLDER / "bootstrap.py"
CONVERTER_PATH = FOLDER / "converter.py"
# The worker package's modules, all of what is shipped of it (a test holds this to the folder's files).
WORKER_MODULES = ("__init__", "calls", "capture", "finals", "mapped", "program", "protocol", "repl", "text", "values")
# The worker package's name inside a sandbox (`bootstrap.py` spells it too: it can import nothing of ours).
WORKER_PACKAGE = "rlm_worker"
# Run with ``python -I -S -c WORKER_LOADER FOLDER ARGS``: loads the worker package from FOLDER under the
# name above and runs its `main`, which sees ``sys.argv == [FOLDER, *ARGS]``. The import system takes each
# module's bytecode from ``FOLDER/__pycache__`` when it is valid for the source (else compiles it in
# memory); nothing is written, and nothing is put on ``sys.path``.
WORKER_LOADER = (
    "import sys\n"
    "from importlib.util import module_from_spec, spec_from_file_location\n"
    "sys.dont_write_bytecode = True\n"
    "sys.argv = sys.argv[1:]\n"
    f"spec = spec_from_file_location({WORKER_PACKAGE!r}, sys.argv[0] + '/__init__.py', "
    "submodule_search_locations=[sys.argv[0]])\n"
    "worker = sys.modules[spec.name] = module_from_spec(spec)\n"
    "spec.loader.exec_module(worker)\n"
    "sys.exit(worker.main())\n"
)


def worker_files() -> dict[str, Path]:
    """The worker package's files by module name, as shipped (the face, ``__init__``, first)."""
    return {name: WORKER_FOLDER / f"{name}.py" for name in WORKER_MODULES}


def worker_sources() -> dict[str, str]:
    """The worker package's sources by module name: what the bootstrap's frame carries."""
    return {name: path.read_text(encoding="utf-8") for name, path in worker_files().items()}


def sandbox_env(home: str) -> dict[str, str]:
    """The worker's whole environment: nothing of the host's (API keys must never reach model code)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
