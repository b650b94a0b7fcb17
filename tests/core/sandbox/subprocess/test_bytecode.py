"""The worker starts from bytecode: each module compiled once per host process, checked against its source, bound
read-only."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

from rlm_adapters.core.sandbox.programs import WORKER_FOLDER, WORKER_LOADER, WORKER_MODULES, worker_files
from rlm_adapters.core.sandbox.subprocess import bytecode, isolation


class NoCompiling(SourceFileLoader):
    """A loader that fails if it has to compile: `get_code` succeeds only from valid bytecode."""

    def source_to_code(self, data: object, path: object, *, _optimize: int = -1) -> object:  # type: ignore[override]
        raise AssertionError("the loader compiled the source: the bytecode was missing or stale")


def _laid_out(tmp_path: Path, source: Path, compiled: Path) -> Path:
    """`source` and its bytecode as the sandbox sees them: ``NAME.py`` and ``__pycache__/NAME.<tag>.pyc``."""
    inside = tmp_path / "opt"
    (inside / "__pycache__").mkdir(parents=True, exist_ok=True)
    target = inside / source.name
    shutil.copy2(source, target)  # the bind keeps size and time; copy2 does too
    shutil.copy(compiled, importlib.util.cache_from_source(str(target)))
    return target


def test_the_worker_bytecode_is_valid_for_its_source_so_the_loader_does_not_compile(tmp_path: Path) -> None:
    for name, source in worker_files().items():
        compiled = bytecode.launch_bytecode(source)
        assert compiled is not None, name
        target = _laid_out(tmp_path, source, compiled)
        code = NoCompiling(name, str(target)).get_code(name)
        assert code is not None and code.co_filename == str(target)  # tracebacks name the file inside


def test_modules_of_one_size_and_time_get_bytecode_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The private folder keys each file by its path too: two sources alike in size and time are not mixed up."""
    first, second = tmp_path / "a" / "program.py", tmp_path / "b" / "program.py"
    for folder, value in ((first, "1"), (second, "2")):
        folder.parent.mkdir()
        folder.write_text(f"VALUE = {value}\n")
        os.utime(folder, ns=(10**18, 10**18))
    monkeypatch.setattr(bytecode, "cached_bytecode", lambda path: None)  # as in an editable install
    try:
        compiled = [bytecode.launch_bytecode(first), bytecode.launch_bytecode(second)]
        assert compiled[0] is not None and compiled[1] is not None and compiled[0] != compiled[1]
        for source, pyc, value in ((first, compiled[0], 1), (second, compiled[1], 2)):
            namespace: dict[str, object] = {}
            exec(
                NoCompiling("program", str(_laid_out(tmp_path / str(value), source, pyc))).get_code("program"),
                namespace,
            )
            assert namespace["VALUE"] == value
    finally:
        bytecode.forget_bytecode()


def test_a_changed_source_is_compiled_again_never_served_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "src" / "program.py"
    source.parent.mkdir()
    source.write_text("VALUE = 1\n")
    monkeypatch.setattr(bytecode, "cached_bytecode", lambda path: None)  # as in an editable install
    first = bytecode.launch_bytecode(source)
    assert first is not None and first == bytecode.launch_bytecode(source)  # once per version
    source.write_text("VALUE = 22\n")
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    second = bytecode.launch_bytecode(source)
    assert second is not None and second != first
    target = _laid_out(tmp_path, source, second)
    namespace: dict[str, object] = {}
    exec(NoCompiling("program", str(target)).get_code("program"), namespace)
    assert namespace["VALUE"] == 22
    stale = _laid_out(tmp_path / "stale", source, first)  # the old bytecode beside the new source
    with pytest.raises(AssertionError, match="compiled the source"):
        NoCompiling("program", str(stale)).get_code("program")


def test_forget_bytecode_compiles_anew_and_keeps_what_running_workers_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "program.py"
    source.write_text("VALUE = 1\n")
    monkeypatch.setattr(bytecode, "cached_bytecode", lambda path: None)  # as in an editable install
    try:
        first = bytecode.launch_bytecode(source)
        bytecode.forget_bytecode()
        second = bytecode.launch_bytecode(source)
        assert first is not None and second is not None
        assert second.parents[1] != first.parents[1]  # a new private folder
        assert first.is_file()  # a worker launched with it may restart from it until exit
    finally:
        bytecode.forget_bytecode()  # nothing computed under the patch stays cached


def test_the_private_bytecode_folder_is_swept_like_a_worker_folder_of_a_dead_process() -> None:
    source = WORKER_FOLDER / "repl.py"
    compiled = bytecode.launch_bytecode(source)
    assert compiled is not None
    if bytecode.cached_bytecode(source) is None:
        folder = compiled.parents[1]
        assert folder.name.startswith(f"rlm-bytecode-{os.getpid()}-")
        assert folder.parent.name == f"rlm-{os.geteuid()}"  # the user's private folder, which is swept


def test_a_bubblewrap_launch_binds_the_bytecode_beside_the_worker_and_starts_through_the_loader(
    tmp_path: Path,
) -> None:
    reach = isolation.Reach("bwrap", "/usr/bin/bwrap", "system", landlock=7, seccomp=True)
    launch = isolation.build_launch(reach, "python3", WORKER_FOLDER, tmp_path / "s", tmp_path / "c")
    argv = launch.argv
    binds = {argv[i + 2]: argv[i + 1] for i, arg in enumerate(argv) if arg == "--ro-bind"}
    tag = sys.implementation.cache_tag
    for name in WORKER_MODULES:  # each module, and its bytecode beside it: nothing else of the package
        assert binds[f"{isolation.INSIDE_WORKER}/{name}.py"] == str(WORKER_FOLDER / f"{name}.py")
        assert Path(binds[f"{isolation.INSIDE_WORKER}/__pycache__/{name}.{tag}.pyc"]).is_file()
    inside = {path for path in binds if path.startswith(isolation.INSIDE_WORKER + "/")}
    assert len(inside) == 2 * len(WORKER_MODULES)
    start = argv.index("-c")
    assert argv[start - 2 : start] == ["-I", "-S"]
    assert argv[start + 1] == WORKER_LOADER and argv[start + 2] == isolation.INSIDE_WORKER


def test_a_stale_installed_bytecode_is_not_bound_a_fresh_one_is_compiled(tmp_path: Path) -> None:
    import py_compile

    source = tmp_path / "installed" / "program.py"
    source.parent.mkdir()
    source.write_text("VALUE = 1\n")
    installed = Path(py_compile.compile(str(source), doraise=True))
    assert bytecode.cached_bytecode(source) == installed  # valid: the installation's own is used
    source.write_text("VALUE = 333\n")  # edited in place (an editable install), its bytecode now stale
    assert bytecode.cached_bytecode(source) is None
    fresh = bytecode.launch_bytecode(source)
    assert fresh is not None and fresh != installed
    namespace: dict[str, object] = {}
    exec(NoCompiling("program", str(_laid_out(tmp_path, source, fresh))).get_code("program"), namespace)
    assert namespace["VALUE"] == 333
