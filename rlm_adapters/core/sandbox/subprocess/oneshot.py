"""One run of a stdlib program behind the subprocess sandbox's walls: one input file in, bounded bytes out.

The document converter (`programs/converter.py`) runs this way, once per document: the same launcher as
the REPL worker (`isolation.build_launch`: bubblewrap or the level ``auto`` chose, then Landlock and seccomp
raised by the program itself), the same folders (`process.new_folders`: a size-capped scratch, a context
folder bound read-only holding the one input file) and the same cgroups (memory, processes), plus what a
one-shot job needs: a wall-clock limit, a cap on what it may print, and a kill of its whole group at the
end. Blocking: callers run it in threads (one per core).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlm_adapters.core.sandbox.programs.worker import encode_frame
from rlm_adapters.core.sandbox.subprocess.cgroups import SandboxCgroup
from rlm_adapters.core.sandbox.subprocess.isolation import IsolationRequest, Reach, build_launch, detect_level
from rlm_adapters.core.sandbox.subprocess.process import kill_now, spawn
from rlm_adapters.core.sandbox.tempdirs import new_folder, remove_folder

STDERR_TAIL_BYTES = 4096
READ_CHUNK = 1 << 20
# Landlock and the mount namespace already hide everything else; these only bound the job itself.
ONESHOT_PROCESSES = 16
ONESHOT_SCRATCH_BYTES = 16 * 1024**2

Ending = Literal["exited", "timeout", "output", "cancelled"]


@dataclass(frozen=True)
class OneShotLimits:
    """The bounds of one run.

    Attributes:
        memory_bytes: Memory of the whole job (its cgroup, where one is writable; the program also caps
            its own address space at it).
        seconds: Wall-clock seconds before the job is killed.
        output_bytes: Bytes it may write on stdout; past them it is killed.
    """

    memory_bytes: int
    seconds: float
    output_bytes: int


@dataclass(frozen=True)
class OneShotRun:
    """What one run gave back.

    Attributes:
        output: What it wrote on stdout (at most `OneShotLimits.output_bytes`).
        stderr: The last few KiB of what it wrote on stderr, decoded with replacement.
        returncode: Its exit status (negative: killed by that signal), None if it had to be killed.
        ending: ``exited`` on its own, else why it was killed: ``timeout``, ``output`` (printed too much),
            ``cancelled``.
        reach: The isolation level it ran at.
        seconds: How long it ran.
    """

    output: bytes
    stderr: str
    returncode: int | None
    ending: Ending
    reach: Reach
    seconds: float


def walled_reach(isolation: IsolationRequest = "auto", python: str | None = None) -> Reach:
    """The level one-shot jobs run at (probed once per interpreter, like the REPL's).

    Raises:
        NoSafeLevel: ``auto``, and nothing here hides the host's files and network.
        RuntimeError: An explicit level cannot be built here.
    """
    return detect_level(isolation, python or sys.executable)


def run_walled(
    program: Path,
    request: dict[str, Any],
    input_file: Path,
    limits: OneShotLimits,
    *,
    libraries: Sequence[str] = (),
    isolation: IsolationRequest = "auto",
    python: str | None = None,
    cancel: threading.Event | None = None,
) -> OneShotRun:
    """Run `program` once behind the walls with `input_file` readable, `request` as its one stdin frame.

    The program sees the input at ``request["input"]`` (the path inside, added here), reads nothing else
    of the host's but the interpreter, `libraries` and its own file, writes only its scratch folder, and
    reaches no network. Its stdout is returned, never parsed here.

    Args:
        program: A standard-library program that raises its walls from ``--walls SPEC`` (as the worker does).
        request: The frame written to its stdin (JSON-able), then stdin is closed.
        input_file: A host file, hard-linked (else copied) into the job's read-only context folder.
        limits: Memory, wall time and output bounds.
        libraries: More folders it may read and execute from (at the same paths inside).
        isolation: The level to ask for (``auto``: the strongest that hides the host).
        python: The interpreter (default: this one).
        cancel: Set from another thread to kill the job.

    Raises:
        NoSafeLevel, RuntimeError: No acceptable isolation level here (see `walled_reach`).
        OSError: The job's folders or process could not be created.
    """
    python = python or sys.executable
    reach = walled_reach(isolation, python)
    root = new_folder("oneshot")
    cgroup: SandboxCgroup | None = None
    popen: subprocess.Popen[bytes] | None = None
    started = time.monotonic()
    try:
        scratch, context = root / "scratch", root / "context"
        scratch.mkdir(mode=0o700)
        context.mkdir(mode=0o700)
        inside_name = "input" + "".join(input_file.suffixes[-1:])
        _link_or_copy(input_file, context / inside_name)
        with contextlib.suppress(OSError):
            context.chmod(0o555)
        if sys.platform.startswith("linux"):
            cgroup = SandboxCgroup.create(ONESHOT_PROCESSES, limits.memory_bytes)
        sizes = (ONESHOT_SCRATCH_BYTES, ONESHOT_SCRATCH_BYTES)
        launch = build_launch(reach, python, program, scratch, context, sizes, libraries=libraries)
        assert launch.context_dir is not None
        frame = encode_frame({**request, "input": f"{launch.context_dir}/{inside_name}"})
        popen = spawn(launch, cgroup)
        output, stderr, ending = _exchange(popen, frame, limits, started, cancel)
        returncode = popen.poll() if ending == "exited" else None
        return OneShotRun(output, stderr, returncode, ending, reach, time.monotonic() - started)
    finally:
        if popen is not None:
            _end(popen, cgroup)
        if cgroup is not None:
            cgroup.kill_all()
            cgroup.remove()
        remove_folder(root)


def _link_or_copy(source: Path, target: Path) -> None:
    """Hand `source` to the job: a hard link (no copy of a large file), else a copy; read-only either way."""
    try:
        os.link(source, target)
    except OSError:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with open(fd, "wb") as out, open(source, "rb") as handle:
            while chunk := handle.read(READ_CHUNK):
                out.write(chunk)
    with contextlib.suppress(OSError):
        target.chmod(0o444)


def _exchange(
    popen: subprocess.Popen[bytes],
    frame: bytes,
    limits: OneShotLimits,
    started: float,
    cancel: threading.Event | None,
) -> tuple[bytes, str, Ending]:
    """Write the request, then read stdout (bounded) and stderr (its tail) until the job ends or must end."""
    assert popen.stdin is not None and popen.stdout is not None and popen.stderr is not None
    with contextlib.suppress(BrokenPipeError, OSError):  # a job that died at once: its exit says why
        popen.stdin.write(frame)
    with contextlib.suppress(OSError):
        popen.stdin.close()
    output = bytearray()
    stderr = bytearray()
    deadline = started + limits.seconds
    with selectors.DefaultSelector() as selector:
        selector.register(popen.stdout, selectors.EVENT_READ, "out")
        selector.register(popen.stderr, selectors.EVENT_READ, "err")
        while selector.get_map():
            if cancel is not None and cancel.is_set():
                return bytes(output), _tail(stderr), "cancelled"
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(output), _tail(stderr), "timeout"
            for key, _ in selector.select(min(left, 0.1)):
                chunk = os.read(key.fd, READ_CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.data == "out":
                    output += chunk
                    if len(output) > limits.output_bytes:
                        return bytes(output[: limits.output_bytes]), _tail(stderr), "output"
                else:
                    stderr = (stderr + chunk)[-STDERR_TAIL_BYTES:]
    # Both pipes closed: the job is ending; wait for its status within what is left of its time.
    try:
        popen.wait(max(deadline - time.monotonic(), 0.01))
    except subprocess.TimeoutExpired:
        return bytes(output), _tail(stderr), "timeout"
    return bytes(output), _tail(stderr), "exited"


def _tail(stderr: bytearray) -> str:
    return bytes(stderr).decode("utf-8", "replace")


def _end(popen: subprocess.Popen[bytes], cgroup: SandboxCgroup | None) -> None:
    """Kill what is left of the job (its group, its cgroup), reap it and close its pipes."""
    if popen.poll() is None:
        kill_now(popen)
        if cgroup is not None:
            cgroup.kill_all()
    with contextlib.suppress(subprocess.TimeoutExpired):
        popen.wait(5.0)
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


SERVER_READY_SECONDS = 60.0  # the server's imports, before its first document
SERVER_MEMORY_ROOM = 512 * 1024**2  # the server's own libraries beside one child's memory limit


class WalledServer:
    """A stdlib program kept running behind the walls, one input file per request (`run`), until `close`.

    The same launch as `run_walled` (its walls, folders and cgroup), started at the first `run` with
    `serve_request` as its first frame; each `run` links one more input file into its read-only context
    folder and sends one request frame, and the program answers with one ``converted`` frame and the
    answer's bytes (the document converter's ``serve`` mode forks a fresh child per request). A request
    that meets its time limit, its output cap or a cancellation, or a server that ends, kills the server:
    the next `run` starts a new one. Used by one thread at a time.

    Args:
        program: The program (it must speak ``serve``).
        serve_request: Its first frame (what to import once).
        memory_bytes: One request's memory limit (the server's cgroup gets it plus its own room).
        libraries: More folders it may read and execute from.
        isolation: The level to ask for.
        python: The interpreter (default: this one).
    """

    def __init__(
        self,
        program: Path,
        serve_request: dict[str, Any],
        memory_bytes: int,
        *,
        libraries: Sequence[str] = (),
        isolation: IsolationRequest = "auto",
        python: str | None = None,
    ) -> None:
        self.program = program
        self.serve_request = serve_request
        self.memory_bytes = memory_bytes
        self.libraries = list(libraries)
        self.isolation: IsolationRequest = isolation
        self.python = python or sys.executable
        self.starts = 0
        self._root: Path | None = None
        self._cgroup: SandboxCgroup | None = None
        self._popen: subprocess.Popen[bytes] | None = None
        self._context_seen = ""
        self._reach: Reach | None = None
        self._count = 0
        self._buffer = bytearray()
        self._stderr = bytearray()

    def run(
        self,
        request: dict[str, Any],
        input_file: Path,
        limits: OneShotLimits,
        cancel: threading.Event | None = None,
    ) -> OneShotRun:
        """Hand `input_file` and `request` to the server; what it answered, as a `OneShotRun`.

        Raises:
            NoSafeLevel, RuntimeError: No acceptable isolation level here.
            OSError: The server could not be started, or did not get ready.
        """
        started = time.monotonic()
        if self._popen is None or self._popen.poll() is not None:
            self._start(cancel)
        assert self._popen is not None and self._root is not None and self._reach is not None
        self._count += 1
        inside_name = f"input-{self._count}" + "".join(input_file.suffixes[-1:])
        linked = self._root / "context" / inside_name
        _link_or_copy(input_file, linked)
        try:
            frame = encode_frame(
                {**request, "input": f"{self._context_seen}/{inside_name}", "output_bytes": limits.output_bytes}
            )
            try:
                self._popen.stdin.write(frame)  # type: ignore[union-attr]
                self._popen.stdin.flush()  # type: ignore[union-attr]
            except OSError:
                return self._ended(started, "exited")
            got = self._frame(started + limits.seconds, cancel)
            if isinstance(got, str):
                return self._ended(started, got)
            header, answer = got
            if len(answer) > limits.output_bytes:
                self.close()
                return OneShotRun(answer[: limits.output_bytes], "", None, "output", self._reach, _since(started))
            code = header.get("returncode")
            returncode = code if isinstance(code, int) and not isinstance(code, bool) else 1
            stderr = header.get("stderr") if isinstance(header.get("stderr"), str) else ""
            return OneShotRun(answer, str(stderr), returncode, "exited", self._reach, _since(started))
        finally:
            with contextlib.suppress(OSError):
                linked.unlink()

    def close(self) -> None:
        """Kill the server and its children, remove its folders (idempotent)."""
        if self._popen is not None:
            _end(self._popen, self._cgroup)
        if self._cgroup is not None:
            self._cgroup.kill_all()
            self._cgroup.remove()
        if self._root is not None:
            remove_folder(self._root)
        self._popen, self._cgroup, self._root = None, None, None
        self._buffer.clear()

    def _start(self, cancel: threading.Event | None) -> None:
        self.close()
        self._reach = walled_reach(self.isolation, self.python)
        self._root = new_folder("server")
        scratch, context = self._root / "scratch", self._root / "context"
        scratch.mkdir(mode=0o700)
        context.mkdir(mode=0o700)
        if sys.platform.startswith("linux"):
            self._cgroup = SandboxCgroup.create(ONESHOT_PROCESSES, self.memory_bytes + SERVER_MEMORY_ROOM)
        sizes = (ONESHOT_SCRATCH_BYTES, ONESHOT_SCRATCH_BYTES)
        launch = build_launch(self._reach, self.python, self.program, scratch, context, sizes, libraries=self.libraries)
        assert launch.context_dir is not None
        self._context_seen = launch.context_dir
        self._popen = spawn(launch, self._cgroup)
        self.starts += 1
        assert self._popen.stdin is not None
        self._popen.stdin.write(encode_frame(self.serve_request))
        self._popen.stdin.flush()
        got = self._frame(time.monotonic() + SERVER_READY_SECONDS, cancel)
        if isinstance(got, str) or got[0].get("type") != "ready":
            tail = _tail(self._stderr).strip().splitlines()[-1:] or [str(got if isinstance(got, str) else got[0])]
            self.close()
            raise OSError(f"the converter server did not start: {tail[0][:300]}")

    def _frame(self, deadline: float, cancel: threading.Event | None) -> tuple[dict[str, Any], bytes] | Ending:
        """The next frame and the bytes it announces, or why none came (the server then must end)."""
        assert self._popen is not None and self._popen.stdout is not None and self._popen.stderr is not None
        wanted: int | None = None
        header: dict[str, Any] = {}
        with selectors.DefaultSelector() as selector:
            selector.register(self._popen.stdout, selectors.EVENT_READ, "out")
            selector.register(self._popen.stderr, selectors.EVENT_READ, "err")
            while True:
                if wanted is None and len(self._buffer) >= 4:
                    length = int.from_bytes(self._buffer[:4], "big")
                    if length > 1 << 20:
                        return "exited"
                    if len(self._buffer) >= 4 + length:
                        try:
                            header = json.loads(bytes(self._buffer[4 : 4 + length]))
                        except ValueError:
                            return "exited"
                        if not isinstance(header, dict):
                            return "exited"
                        size = header.get("output_bytes", 0)
                        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                            return "exited"
                        del self._buffer[: 4 + length]
                        wanted = size
                if wanted is not None and len(self._buffer) >= wanted:
                    answer = bytes(self._buffer[:wanted])
                    del self._buffer[:wanted]
                    return header, answer
                if cancel is not None and cancel.is_set():
                    return "cancelled"
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                if not selector.get_map():
                    return "exited"
                for key, _ in selector.select(min(left, 0.1)):
                    chunk = os.read(key.fd, READ_CHUNK)
                    if not chunk:
                        selector.unregister(key.fileobj)
                    elif key.data == "out":
                        self._buffer += chunk
                    else:
                        self._stderr = (self._stderr + chunk)[-STDERR_TAIL_BYTES:]

    def _ended(self, started: float, ending: Ending) -> OneShotRun:
        """The server met a limit or ended mid-request: kill it; the run says why (its status, if it exited)."""
        assert self._reach is not None
        popen = self._popen
        stderr = _tail(self._stderr)
        returncode = None
        if ending == "exited" and popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(1.0)
            returncode = popen.poll()
        reach = self._reach
        self.close()
        if ending == "exited" and returncode in (None, 0):
            returncode = 1  # it answered nothing: a failure however it ended
        return OneShotRun(b"", stderr, returncode, ending, reach, _since(started))


def _since(started: float) -> float:
    return time.monotonic() - started
