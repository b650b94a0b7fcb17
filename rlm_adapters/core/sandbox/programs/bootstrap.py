"""The first program Docker and the cloud sandboxes start: it receives the worker and the context, then runs it.

Run as ``python3 -I -S -c <this file's text> SCRATCH MODE`` (or as a file, with the same arguments), with the
host on its stdin / stdout. It makes the scratch folder and works in it, becomes a process-group leader and
writes its pid to ``worker.pid`` (so a provider without a kill call can stop the worker and all it started),
then reads one frame ``{worker, context_path, context_bytes}`` (4-byte big-endian length + JSON), then
``context_bytes`` raw bytes of context, which it writes to ``context_path`` (read-only once complete;
``-1``: the context is already in place, after a restart or an upload), and runs the worker's source as
``__main__`` on the same stdin: the stdin buffer keeps anything read ahead.

MODE says how the provider's process API carries bytes: ``raw`` (both ways), ``base64`` (base64 lines
both ways, for APIs that carry text: Daytona) or ``base64-out`` (bytes in, base64 lines out: E2B, whose
stdin takes bytes but whose stdout comes back as text). The lines are re-encoded here, around the
unchanged worker. Standard library only, and nothing of this package: the host sends this file's text.
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
    from collections.abc import Callable
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


def _pipe_through(fd: int, pump: Callable[[int, int], None], inbound: bool) -> None:
    """Put a pipe at `fd` whose other end a thread running `pump` connects to the real `fd`."""
    read, write = os.pipe()
    real = os.dup(fd)
    os.dup2(read if inbound else write, fd)
    os.close(read if inbound else write)
    args = (real, write) if inbound else (read, real)
    threading.Thread(target=pump, args=args, daemon=True).start()


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
    if mode == "base64":
        _pipe_through(0, _decode, inbound=True)
    if mode in ("base64", "base64-out"):
        _pipe_through(1, _encode, inbound=False)
    stdin = sys.stdin.buffer
    boot = json.loads(stdin.read(struct.unpack(">I", stdin.read(4))[0]))
    if boot["context_bytes"] >= 0:
        _receive_context(stdin, boot["context_path"], boot["context_bytes"])
    namespace = {"__name__": "__main__", "__file__": "worker.py"}
    exec(compile(boot["worker"], "worker.py", "exec"), namespace)


if __name__ == "__main__":
    boot()
