"""The worker program: stands up the process, then serves cells until the host says stop.

Run under a sandbox (see the package's face for how it is loaded) it raises the walls the host asked for
before anything else, speaks frames on stdin and on the process's original stdout (file descriptor 1 is
then pointed at stderr so that nothing user code writes can corrupt a frame), applies the run's limits,
loads the context, and runs each ``exec`` in one `repl.Repl`, sending its result, and the final answer the
moment it is given.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import signal
import sys
import threading
import time

from .mapped import mapped_text
from .protocol import WorkerChannel, read_frame
from .repl import DEFAULT_CAPTURE_CHARS, Repl
from .text import safe_text, type_name

# `typing` costs a few ms of every cold start and is needed by type checkers only (annotations are strings).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def load_context(spec: dict[str, Any] | None) -> Any:
    """Load the context file the host wrote (text or JSON).

    With ``map`` (the host shares this ASCII file with other runs, read-only behind the walls) the text is
    the file's own mapped pages where the interpreter allows it (`mapped.mapped_text`), else decoded.
    """
    if not spec:
        return None
    path = spec["path"]
    if spec.get("format") == "json":
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    if spec.get("map"):
        text = mapped_text(path)
        if text is not None:
            return text
    return read_text(path)


def read_text(path: str) -> str:
    """The file's text, exactly as the host wrote it (no newline translation: a ``local`` run sees the same).

    Decoded straight from a read-only mapping of the file: reading it through a text stream held its bytes
    and its text at once (a 200 MB context peaked at twice its size in every worker; issue 41).
    """
    import mmap

    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return ""
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return str(mapped, "utf-8", "surrogatepass")  # as the host wrote it: a lone surrogate is kept


def apply_limits(limits: dict[str, Any]) -> list[str]:
    """Apply resource limits the host asked for (POSIX only); returns the ones that took effect."""
    applied: list[str] = []
    try:
        import resource
    except ImportError:
        return applied
    table = {
        "memory_bytes": "RLIMIT_AS",
        "file_size_bytes": "RLIMIT_FSIZE",
        "processes": "RLIMIT_NPROC",
        "open_files": "RLIMIT_NOFILE",
    }
    for key, name in table.items():
        value = limits.get(key)
        if value is None or not hasattr(resource, name):
            continue
        try:
            resource.setrlimit(getattr(resource, name), (int(value), int(value)))
            applied.append(key)
        except (ValueError, OSError):
            pass
    return applied


class CpuTimeLimitExceeded(BaseException):
    """Raised in the cell's thread on SIGXCPU (a BaseException so `except Exception` cannot swallow it)."""


class CpuBudget:
    """A per-cell CPU-time limit: RLIMIT_CPU's soft limit set relative to the usage before each cell.

    The kernel sends SIGXCPU once the soft limit is passed (and every second after); the handler raises
    in the main thread, which runs the cell, so the cell ends and the namespace survives.
    """

    def __init__(self, seconds: float) -> None:
        import resource
        import signal

        self._resource = resource
        self.seconds = seconds
        signal.signal(signal.SIGXCPU, self._expired)

    def _expired(self, signum: int, frame: Any) -> None:
        raise CpuTimeLimitExceeded(
            f"the cell used more than its CPU time limit of {self.seconds:g} s and was stopped "
            "(limit: cpu_time_limit); your variables survived"
        )

    def _set_soft(self, soft: int) -> None:
        _, hard = self._resource.getrlimit(self._resource.RLIMIT_CPU)
        if hard != self._resource.RLIM_INFINITY:
            soft = min(soft, hard)
        self._resource.setrlimit(self._resource.RLIMIT_CPU, (soft, hard))

    def arm(self) -> None:
        usage = self._resource.getrusage(self._resource.RUSAGE_SELF)
        self._set_soft(int(usage.ru_utime + usage.ru_stime + self.seconds) + 1)

    def disarm(self) -> None:
        self._set_soft(self._resource.RLIM_INFINITY)


class CellTimeLimitExceeded(BaseException):
    """Raised in the cell's code when the host interrupts it (its cell_timeout passed); a BaseException so
    that ``except Exception`` in model code does not swallow it."""


class CellStopper:
    """Stops the running cell when the host asks (an ``interrupt`` frame, sent past its ``cell_timeout``).

    The reader thread signals the main thread, which runs the cell: the signal wakes a blocking call (a
    sleep, a lock) and its handler raises `CellTimeLimitExceeded` in the cell's code, so the cell ends as
    any failing cell does, with what it printed and the namespace kept. Outside a cell the request is ignored.
    """

    def __init__(self, timeout: float | None) -> None:
        import signal

        self._signal = signal
        self.timeout = timeout
        self.cell_id: Any = None  # the cell running now (None between cells)
        self._lock = threading.Lock()
        signal.signal(signal.SIGUSR1, self._raise)

    def _raise(self, signum: int, frame: Any) -> None:
        if self.cell_id is None:
            return
        limit = f"its limit of {self.timeout:g} s" if self.timeout else "its time limit"
        raise CellTimeLimitExceeded(
            f"the cell computed past {limit} (cell_timeout; time waiting on llm_query and other model calls "
            "does not count) and was stopped; what it printed is above and your variables survived"
        )

    def request(self, cell_id: Any) -> None:
        """The host's ``interrupt`` for `cell_id` (on the reader thread)."""
        with self._lock:
            if cell_id is None or cell_id != self.cell_id:
                return
        self._signal.pthread_kill(threading.main_thread().ident or 0, self._signal.SIGUSR1)

    def running(self, cell_id: Any) -> None:
        """The main thread starts (`cell_id`) or ends (None) a cell."""
        with self._lock:
            self.cell_id = cell_id


def add_site_packages() -> None:
    """Put site-packages on the path without running `site`'s ``.pth`` hooks.

    The host starts the worker with ``-S``: processing ``.pth`` files (editable installs, certificate
    shims) costs about 55 ms of CPU per start, while model code still expects to import numpy & co.
    """
    import site

    for path in site.getsitepackages():
        if path not in sys.path:
            sys.path.append(path)


def raise_walls(argv: list[str]) -> dict[str, Any]:
    """Raise the walls the host asked for (``--walls SPEC``: Landlock, seccomp, no capabilities).

    Runs first, while the worker is single-threaded (Landlock and seccomp bind the calling thread and
    what it starts). The walls module sits next to this file and is loaded from the path in the spec:
    ``python -I`` puts no folder of ours on ``sys.path``. Its cached bytecode is used when the host
    made it visible (a cold start saves compiling it). Raises if a wall cannot be raised.
    """
    if len(argv) < 3 or argv[1] != "--walls":
        return {}
    from importlib.machinery import SourceFileLoader

    spec = json.loads(argv[2])
    namespace: dict[str, Any] = {"__name__": "rlm_walls"}
    code = SourceFileLoader("rlm_walls", spec["module"]).get_code("rlm_walls")
    if code is None:
        raise ImportError(f"no code in the walls module {spec['module']!r}")
    exec(code, namespace)
    applied: dict[str, Any] = namespace["apply"](spec)
    return applied


def main() -> int:
    """Serve the protocol on stdin / the original stdout until shutdown or end of input."""
    try:
        raise_walls(sys.argv)
    except Exception as exc:  # fail closed: no model code runs without the walls the host asked for
        print(f"rlm worker: cannot raise the sandbox walls: {exc}", file=sys.stderr)
        return 3
    if sys.flags.no_site:
        add_site_packages()
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # a C extension writing to fd 1 must not corrupt the frames
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), encoding="utf-8", line_buffering=True)
    # The frames keep the original stdin buffer (a bootstrap may have read ahead into it); `sys.stdin` is
    # /dev/null. Model code reading stdin cannot take a frame, and a child it forks cannot deadlock: each
    # `multiprocessing` child closes `sys.stdin`, and closing the protocol's buffer would wait forever for
    # the lock the reader thread held at the fork.
    protocol_in = sys.stdin.buffer
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    channel = WorkerChannel(protocol_in, protocol_out)
    init = read_frame(protocol_in)
    if init is None or init.get("type") != "init":
        print("rlm worker: expected an init frame", file=sys.stderr)
        return 2
    limits = init.get("limits") or {}
    applied = apply_limits(limits)
    cpu: CpuBudget | None = None
    if limits.get("cpu_seconds") and sys.platform != "win32":
        cpu = CpuBudget(float(limits["cpu_seconds"]))
        applied.append("cpu_seconds")
    try:
        context = load_context(init.get("context"))
    except (OSError, ValueError) as exc:
        channel.send({"type": "ready", "ok": False, "error": f"cannot load the context file: {exc}"})
        return 1
    repl = Repl(
        context,
        channel.call,
        init.get("tools") or {},
        int(init.get("capture_chars") or DEFAULT_CAPTURE_CHARS),
    )
    repl.add_values(init.get("values") or {})
    stopper = CellStopper(limits.get("cell_timeout"))
    channel.on_interrupt = stopper.request
    reader = threading.Thread(target=read_frames, args=(channel,), name="rlm-frames", daemon=True)
    reader.start()
    channel.send({"type": "ready", "ok": True, "pid": os.getpid(), "limits": applied, "python": sys.version.split()[0]})
    while True:
        command = channel.next_command()
        if command["type"] == "shutdown":
            break
        cell_id = command.get("id")
        repl.on_final = functools.partial(send_final, channel, cell_id)
        if cpu is not None:
            cpu.arm()
        stopper.running(cell_id)
        try:
            result = run_command(repl, command)
        finally:
            stopper.running(None)
            repl.on_final = None  # a thread of this cell calling FINAL later must not announce it for this id
            if cpu is not None:
                cpu.disarm()
        send_result(channel, cell_id, result)
    # Skip the interpreter's finalization: the frames reader (a daemon thread) sits in a read of stdin's
    # buffer, and finalizing while it holds that lock aborts the process ("could not acquire lock for
    # <stdin> at interpreter shutdown"), seen about once in a few hundred clean shutdowns.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # model code may have replaced or closed them
            stream.flush()
    os._exit(0)


def read_frames(channel: WorkerChannel) -> None:
    """The reader thread: the host's frames until its stream ends; then, unless it said stop, end at once.

    The stream ends without a ``shutdown`` frame when the host is gone (killed with SIGKILL, say): a cell still
    running would otherwise run on with nobody to stop it (issue 48: model code ticked on for good after its
    host was killed at the ``unshare`` and ``process`` levels). This is the worker's own half of that tie; the
    kernel's is the parent-death signal the host's launch sets, and the PID namespace that dies with its first
    process. Skipping the interpreter's finalization as `main` does.
    """
    channel.read_loop()
    if not channel.shutdown_asked:
        end_with_everything_started()


def end_with_everything_started() -> None:
    """Kill this worker and every process it started that kept its process group, now."""
    if os.getpgrp() == os.getpid():  # a group of its own (the host's launch): nothing else is in it
        with contextlib.suppress(OSError):
            os.killpg(0, signal.SIGKILL)
    os._exit(70)


def send_final(channel: WorkerChannel, cell_id: Any, final: dict[str, Any]) -> None:
    """Tell the host the final answer the moment it is given (the cell's result repeats it)."""
    channel.send({"type": "final", "id": cell_id, "final": final})


def run_command(repl: Repl, command: dict[str, Any]) -> dict[str, Any]:
    """Run an ``exec`` command; whatever goes wrong, a result that keeps a final answer already given."""
    started = time.perf_counter()
    try:
        return repl.execute(str(command.get("code", "")))
    except BaseException as exc:  # e.g. the CPU limit's signal arriving after the cell's own code ended
        return {
            "output": "",
            "output_chars": 0,
            "error": f"the cell ended with {type_name(exc)} outside its code",
            "final": repl.last_final,
            "variables": {},
            "duration": time.perf_counter() - started,
        }


def send_result(channel: WorkerChannel, cell_id: Any, result: dict[str, Any]) -> None:
    """Send a cell's result; if it cannot be encoded, a short one that still carries the final answer."""
    try:
        channel.send({"type": "result", "id": cell_id, **result})
        return
    except BaseException as exc:
        error = f"the cell's result could not be sent to the host ({type_name(exc)}: {safe_text(exc)[:200]})"
    channel.send(
        {
            "type": "result",
            "id": cell_id,
            "output": "",
            "output_chars": 0,
            "error": error,
            "final": result.get("final"),
            "variables": {},
            "duration": 0.0,
        }
    )
