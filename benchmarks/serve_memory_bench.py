"""Memory of `rlm serve` per request: a refused big body, and big requests waiting for a run slot (issue 48, 4).

The server runs in a child process (so that its resident memory is its own), in front of a fake OpenAI server
in this process whose first root call never answers: with ``--max-runs 1`` that run holds the only slot, and
every later request waits. Two cases, each in a fresh server:

- ``refused``: one ``--mib`` MiB body that is refused after it was read (an unknown field at its end);
- ``waiting``: ``--waiting`` streaming requests of ``--mib`` MiB each, read and checked (each has its first
  chunk, which the server sends once the request is checked), all waiting for the slot.

Each reports the server's resident memory before, after (``VmRSS``) and at its peak (``VmHWM``), in MiB.
Body shapes (``--shape``): ``ascii`` (one user message of ASCII text), ``wide`` (the same with one emoji at
its end: Python then holds the text at 4 bytes a character), ``messages`` (300,000 messages of 170
characters: about the most JSON values a body may hold, `MAX_JSON_VALUES`), ``many`` (two million
two-character messages: the most Python objects per byte, refused since issue 48 before it is parsed).

Run: ``python -m benchmarks.serve_memory_bench --mib 60 --waiting 4 --shape ascii``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from rlm_adapters.testing import FakeOpenAIServer

MIB = 2**20

CHILD = """
import sys, socket, uvicorn
from dataclasses import replace
from rlm_adapters.serve import ServeConfig, build_app, parse_model
from rlm_adapters.serve.http import protocol
url, max_runs, max_waiting, max_body = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model = replace(parse_model(f"test=root-model,sub=leaf-model,base_url={url}"), api_key="k")
config = ServeConfig([model], environment="local", max_runs=max_runs, max_waiting=max_waiting,
                     max_body_bytes=max_body)
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(64)
print(sock.getsockname()[1], flush=True)
server = uvicorn.Server(uvicorn.Config(build_app(config), log_level="error", http=protocol(120)))
server.run(sockets=[sock])
"""


@dataclass(frozen=True)
class Measure:
    """One case's figures, in MiB of the server's resident memory."""

    case: str
    shape: str
    body_mib: float
    requests: int
    before: float
    after: float
    peak: float
    outcome: str


def body_of(shape: str, size: int, *, refused: bool = False, stream: bool = False) -> bytes:
    """A chat completion body of about `size` bytes (refused: with an unknown field after the messages)."""
    head = b'{"model": "test", "stream": %s, "messages": ' % (b"true" if stream else b"false")
    tail = b', "not_a_field": 1}' if refused else b"}"
    if shape in ("many", "messages"):
        text = b"ab" if shape == "many" else b"y" * 170
        one = b'{"role": "user", "content": "' + text + b'"}, '
        count = max(1, size // len(one))
        messages = b"[" + one * (count - 1) + b'{"role": "user", "content": "what?"}]'
    else:
        text = b"x" * size + (b"\\ud83d\\ude00" if shape == "wide" else b"")
        messages = b'[{"role": "user", "content": "' + text + b'"}]'
    return head + messages + tail


def _status(pid: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                figures[key] = int(value.split()[0]) / 1024
    return figures


def _post(port: int, body: bytes) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port))
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    conn.sendall(head.encode() + body)
    return conn


def _first_bytes(conn: socket.socket, timeout: float = 600.0) -> bytes:
    conn.settimeout(timeout)
    return conn.recv(65536)


def _settle(pid: int, seconds: float = 1.0) -> dict[str, float]:
    time.sleep(seconds)  # the freed memory goes back to the allocator's pools; what stays is what is held
    return _status(pid)


def measure(case: str, shape: str, mib: float, waiting: int = 4) -> Measure:
    """One case in a fresh server process (see the module's docstring)."""
    size = int(mib * MIB)
    with FakeOpenAIServer(["FINAL(1)"]) as upstream:
        upstream.hang_next()  # the first run's root call never answers: it holds the only slot
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, upstream.base_url, "1", str(max(waiting, 1)), str(size + 4 * MIB)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            port = int(child.stdout.readline())
            conns = [_post(port, json.dumps({"model": "test", "messages": [{"role": "user", "content": "hold"}],
                                             "stream": True}).encode())]  # fmt: skip
            _first_bytes(conns[0])
            before = _settle(child.pid)["VmRSS"]
            if case == "refused":
                conn = _post(port, body_of(shape, size, refused=True))
                conns.append(conn)
                outcome = _first_bytes(conn).split(b"\r\n", 1)[0].decode()
                requests = 1
            else:
                body = body_of(shape, size, stream=True)
                conns += [_post(port, body) for _ in range(waiting)]
                firsts = [_first_bytes(conn) for conn in conns[1:]]
                outcome = f"{sum(b' 200 ' in first for first in firsts)} of {waiting} waiting"
                requests = waiting
            figures = _settle(child.pid)
            return Measure(case, shape, size / MIB, requests, before, figures["VmRSS"], figures["VmHWM"], outcome)
        finally:
            for conn in conns:
                conn.close()
            child.kill()  # a graceful stop would wait for the run that never ends
            child.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, default=60.0, help="body size in MiB (default 60)")
    parser.add_argument("--waiting", type=int, default=4, help="requests waiting for the slot (default 4)")
    parser.add_argument("--shape", choices=("ascii", "wide", "messages", "many"), nargs="+", default=["ascii"])
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'case':<8} {'shape':<6} {'body MiB':>8} {'n':>2} {'before':>7} {'after':>7} {'peak':>7}  outcome")
    for shape in args.shape:
        for case in ("refused", "waiting"):
            m: Any = measure(case, shape, args.mib, args.waiting)
            print(
                f"{m.case:<8} {m.shape:<6} {m.body_mib:>8.0f} {m.requests:>2} {m.before:>7.0f} {m.after:>7.0f} "
                f"{m.peak:>7.0f}  {m.outcome}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
