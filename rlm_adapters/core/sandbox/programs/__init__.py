"""The programs the sandboxes ship, standard library only, and where they are.

- `worker.py`: the REPL worker every out-of-process sandbox runs (the ``local`` sandbox imports its `Repl`).
- `walls.py`: the walls the worker raises around itself under the subprocess launcher (and its probe).
- `bootstrap.py`: what Docker and the cloud sandboxes start first: it receives the worker and the context
  over stdin, writes the context into the scratch folder and runs the worker (see `shipping`).
- `converter.py`: converts one document to text behind the same walls, once per document
  (`subprocess/oneshot.py` starts it; `rlm_adapters.documents` asks it).

Each is copied or bound into a sandbox as-is, so none imports anything outside the standard library,
and this module (which the launchers import for the paths) imports none of them.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BOOTSTRAP_PATH", "CONVERTER_PATH", "FOLDER", "WALLS_PATH", "WORKER_PATH", "sandbox_env"]

FOLDER = Path(__file__).resolve().parent
WORKER_PATH = FOLDER / "worker.py"
WALLS_PATH = FOLDER / "walls.py"
BOOTSTRAP_PATH = FOLDER / "bootstrap.py"
CONVERTER_PATH = FOLDER / "converter.py"


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
