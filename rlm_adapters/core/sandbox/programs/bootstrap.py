"""The first program Docker and the cloud sandboxes start: it receives the worker and the context, then runs it.

Run as ``python3 -I -S -c <this file's text> SCRATCH MODE`` (or as a file, with the same arguments), with the
host on its stdin / stdout. It makes the scratch folder and works in it, becomes a process-group leader and
writes its pid to ``worker.pid`` (so a provider without a kill call can stop the worker and all it started),
then reads one frame ``{worker, context_path, context_bytes}`` (4-byte big-endian length + JSON), then
``context_bytes`` raw bytes of context, which it writes to ``context_path`` (read-only once complete;
``-1``: the context is already in place, after a restart or an upload), and runs the worker on the same
stdin (the stdin buffer keeps anything read ahead). ``worker`` maps each module of the worker package to
its source; they are loaded from memory as the package ``rlm_worker`` (`SourcesFinder`), never written
where model code could change them.

MODE says how the provider's process API carries bytes: ``raw`` (both ways), ``base64`` (base64 lines
both ways, for APIs that carry text: Daytona) or ``base64-out`` (bytes in, base64 lines out: E2B, whose
stdin takes bytes but whose stdout comes back as text). The lines are re-encoded around the unchanged
worker by a child process that alone holds the provider's streams (the worker keeps pipes to it, so
nothing model code can reach writes a line the host reads). Standard library only, and nothing of this
package: the host sends this file's text.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import threading

TYPE_CHECKING = False  # `typing` is for type checkers only: every start would pay for its import
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import BinaryIO


def _decode(src: int, dst: int) -> None:
    with os.fdopen(src, "rb") as lines, os.fdopen(dst, "wb", buffering=0) as out:
        for line in lines:
            if line.strip():
                out.write(base64.b64decode(line))


def _encode(src: int, dst: int) -> None:
    with os.fdopen(src, "rb", buffering=0) as raw, os.fdopen(dst, "wb", buffering=0) as out:
        while chunk := raw.read(1 << 16):
            out.write(base64.b64encode(chunk) + b"\n")


def _undumpable() -> None:
    """Keep other processes of the sandbox user out of this one's ``/proc/PID/fd`` (best effort: not root)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):
        pass


def _pump_in_a_child(decode_stdin: bool) -> None:
    """Re-encode the frames as base64 lines in a child process that alone holds the real stdout (and stdin).

    The worker, where model code runs, keeps only pipes to it: a line the host reads was cut and encoded
    here, never written by model code straight to the provider's stream (a write without a newline once
    grew the host's pending line without bound).
    """
    out_read, out_write = os.pipe()
    in_read, in_write = os.pipe() if decode_stdin else (-1, -1)
    if os.fork() == 0:
        try:
            _undumpable()
            for fd in (out_write, in_read):
                if fd >= 0:
                    os.close(fd)
            if decode_stdin:
                threading.Thread(target=_decode, args=(os.dup(0), in_write), daemon=True).start()
            os.close(0)
            _encode(out_read, 1)
        finally:
            os._exit(0)  # the worker's output ended: the stdin pump goes with this process
    os.dup2(out_write, 1)
    os.close(out_write)
    os.close(out_read)
    if decode_stdin:
        os.dup2(in_read, 0)
        os.close(in_read)
        os.close(in_write)


def _receive_context(stdin: BinaryIO, path: str, left: int) -> None:
    part = path + ".part"
    with open(part, "wb") as out:
        while left:
            chunk = stdin.read(min(left, 1 << 20))
            if not chunk:
                sys.exit("context cut short")
            out.write(chunk)
            left -= len(chunk)
    os.replace(part, path)
    os.chmod(path, 0o444)


class SourcesFinder:
    """Finds and loads the worker package's modules from the sources the host sent (an import finder).

    Args:
        sources: Module name (``__init__`` for the package itself) -> its source.
    """

    # The worker package's name (`programs.WORKER_PACKAGE` on the host: nothing of it can be imported here).
    PACKAGE = "rlm_worker"

    def __init__(self, sources: dict[str, str]) -> None:
        self._sources = sources

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        package, _, module = name.partition(".")
        if package != self.PACKAGE or (module or "__init__") not in self._sources:
            return None
        from importlib.machinery import ModuleSpec

        # A loader by its two methods (not an `importlib.abc.Loader`: one more import on every start).
        return ModuleSpec(name, self, origin=self._filename(name), is_package=not module)  # type: ignore[arg-type]

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        key = module.__name__.partition(".")[2] or "__init__"
        exec(compile(self._sources[key], self._filename(module.__name__), "exec"), module.__dict__)

    def _filename(self, name: str) -> str:
        return f"{self.PACKAGE}/{name.partition('.')[2] or '__init__'}.py"


def boot() -> None:
    """Receive the worker and the context, then run the worker in this process."""
    scratch, mode = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    os.chdir(scratch)
    try:  # noqa: SIM105 - contextlib is one more import on every start
        os.setsid()
    except OSError:  # already a group leader
        pass
    with open("worker.pid", "w") as pid:
        pid.write(str(os.getpid()))
    if mode in ("base64", "base64-out"):
        _pump_in_a_child(decode_stdin=mode == "base64")
    stdin = sys.stdin.buffer
    boot = json.loads(stdin.read(struct.unpack(">I", stdin.read(4))[0]))
    if boot["context_bytes"] >= 0:
        _receive_context(stdin, boot["context_path"], boot["context_bytes"])
    sys.meta_path.insert(0, SourcesFinder(boot["worker"]))
    worker = __import__(SourcesFinder.PACKAGE)
    sys.exit(worker.main())


if __name__ == "__main__":
    boot()
