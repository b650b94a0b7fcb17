"""What is shipped of the worker package, and how each launcher loads it: all of it, under one name, nothing else."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
import sys
from pathlib import Path

from rlm_adapters.core.sandbox.programs import (
    BOOTSTRAP_PATH,
    WORKER_FOLDER,
    WORKER_LOADER,
    WORKER_MODULES,
    WORKER_PACKAGE,
    worker_sources,
)
from rlm_adapters.core.sandbox.programs.bootstrap import SourcesFinder
from rlm_adapters.core.sandbox.shipping import boot_frame
from tests.core.sandbox.helpers import start

# Run in the sandbox: the worker's modules as loaded, whether anything of the host's package is, and whether a
# folder of the worker's is on sys.path (model code could then import its files by their bare names).
LOADED = (
    "import sys\n"
    "print(sorted(n for n in sys.modules if n.partition('.')[0] in ('rlm_worker', 'rlm_adapters')))\n"
    "print([p for p in sys.path if 'worker' in p or 'programs' in p])"
)
EXPECTED = sorted(WORKER_PACKAGE if name == "__init__" else f"{WORKER_PACKAGE}.{name}" for name in WORKER_MODULES)


def test_the_module_list_is_the_folder_and_every_sibling_import_is_relative() -> None:
    assert sorted(WORKER_MODULES) == sorted(path.stem for path in WORKER_FOLDER.glob("*.py"))
    for name, source in worker_sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1 and node.module in WORKER_MODULES, f"{name}: from {node.module}"


def test_the_bootstrap_names_the_package_as_the_host_does() -> None:
    assert SourcesFinder.PACKAGE == WORKER_PACKAGE


async def test_the_subprocess_worker_is_the_package_loaded_from_its_folder(tmp_path: Path) -> None:
    sandbox = await start(tmp_path)
    try:
        result = await sandbox.execute(LOADED, None)
    finally:
        await sandbox.aclose()
    assert result.error is None
    assert result.output == f"{EXPECTED}\n[]\n"


def test_the_bootstrapped_worker_is_the_package_loaded_from_memory(tmp_path: Path) -> None:
    """The bootstrap as Docker and the cloud sandboxes run it, with this interpreter: it writes no module."""
    context = b"the context"
    body = json.dumps({"type": "init", "context": {"path": "context.txt"}}).encode()
    cell = json.dumps({"type": "exec", "id": 1, "code": LOADED}).encode()
    shutdown = json.dumps({"type": "shutdown"}).encode()
    frames = b"".join(struct.pack(">I", len(b)) + b for b in (body, cell, shutdown))
    stdin = boot_frame("context.txt", len(context)) + context + frames
    scratch = tmp_path / "scratch"
    argv = [sys.executable, "-I", "-S", "-c", BOOTSTRAP_PATH.read_text(), str(scratch), "raw"]
    done = subprocess.run(argv, input=stdin, capture_output=True, timeout=60, check=False, env={})
    assert done.returncode == 0, done.stderr[-500:]
    replies = []
    out = done.stdout
    while out:
        (length,) = struct.unpack(">I", out[:4])
        replies.append(json.loads(out[4 : 4 + length]))
        out = out[4 + length :]
    assert [r["type"] for r in replies] == ["ready", "result"]
    assert replies[1]["error"] is None and replies[1]["output"] == f"{EXPECTED}\n[]\n"
    assert sorted(p.name for p in scratch.iterdir()) == ["context.txt", "worker.pid"]  # no module on disk


def test_the_loader_runs_the_package_from_any_folder_with_its_bytecode_or_without(tmp_path: Path) -> None:
    """`WORKER_LOADER` needs nothing but the folder: a copy elsewhere (as bubblewrap binds it) runs the same."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    for name, source in worker_sources().items():
        (folder / f"{name}.py").write_text(source)
    argv = [sys.executable, "-I", "-S", "-c", WORKER_LOADER, str(folder)]
    done = subprocess.run(argv, input=b"", capture_output=True, timeout=60, check=False, env={})
    assert done.returncode == 2 and b"expected an init frame" in done.stderr  # it ran, and wrote nothing
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{name}.py" for name in WORKER_MODULES)
