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
import os
import selectors
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlm_adapters.core.sandbox.programs.worker import encode_frame
from rlm_adapters.core.sandbox.subprocess.cgroups import SandboxCgroup
from rlm_adapters.core.sandbox.subprocess.isolation import IsolationRequest, Reach, build_launch, detect_level
from rlm_adapters.core.sandbox.subprocess.process import kill_now, remove_folder, spawn

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
    root = Path(tempfile.mkdtemp(prefix=f"rlm-worker-{os.getpid()}-oneshot-"))
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
