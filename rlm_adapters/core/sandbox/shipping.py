"""The host's half of `programs/bootstrap.py`: shipping the worker and the context to a machine that has neither.

Docker and every cloud sandbox start the same bootstrap program (`bootstrap_argv`), write it one frame carrying
the worker's sources and naming the context file (`boot_frame`), then the context's raw bytes, streamed in pieces
straight from the host file (`send_context`: never a second full copy in memory, no upload API needed). A
restart sends ``context_bytes = -1``: the context is already there. Nothing of the host is mounted, so a
remote engine (``DOCKER_HOST``) or a provider's machine works the same as a local one.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from rlm_adapters.core.sandbox.programs import BOOTSTRAP_PATH, worker_sources
from rlm_adapters.core.sandbox.programs.worker import HEADER
from rlm_adapters.errors import SandboxError

# How the provider's process API carries bytes (see `programs/bootstrap.py`).
Transport = Literal["raw", "base64", "base64-out"]
# Largest piece written to a remote stdin at once: SDKs buffer a write in memory (Modal caps it at 2-16 MiB).
CHUNK = 1 << 20
# Kills the worker's process group (the worker and everything it started): argv[1] is the scratch folder,
# where the bootstrap wrote its pid.
KILL_GROUP = (
    "import os, signal, sys\ntry:\n    os.killpg(int(open(sys.argv[1] + '/worker.pid').read()), signal.SIGKILL)\n"
    "except (OSError, ValueError):\n    pass"
)


def bootstrap_argv(python: str, scratch: str, transport: Transport) -> list[str]:
    """The command that starts the bootstrap (and then the worker) with `scratch` as its folder."""
    return [python, "-I", "-S", "-c", BOOTSTRAP_PATH.read_text(), scratch, transport]


def kill_group_argv(python: str, scratch: str) -> list[str]:
    """The command that ends the bootstrapped worker's process group (the worker and all it started)."""
    return [python, "-I", "-S", "-c", KILL_GROUP, scratch]


def boot_frame(context_path: str, context_bytes: int) -> bytes:
    """The bootstrap's one frame: the worker's sources, where to write the context and how many bytes follow.

    Args:
        context_path: The context file's path inside the sandbox (relative: in the scratch folder).
        context_bytes: How many bytes of context follow the frame; -1 when the file is already in place.
    """
    body = json.dumps(
        {"worker": worker_sources(), "context_path": context_path, "context_bytes": context_bytes}
    ).encode()
    return HEADER.pack(len(body)) + body


async def send_context(write: Callable[[bytes], Awaitable[None]], path: Path, size: int) -> None:
    """Send exactly `size` bytes of `path` through `write`, one `CHUNK` in memory at a time.

    Raises:
        SandboxError: The file shrank while it was being sent.
    """
    with path.open("rb") as handle:
        left = size
        while left > 0:
            chunk = await asyncio.to_thread(handle.read, min(CHUNK, left))
            if not chunk:
                raise SandboxError(f"the context file {path} shrank while it was being sent")
            await write(chunk)
            left -= len(chunk)
