"""The REPL worker: one program, standard library only, run wherever a sandbox starts it.

It keeps a namespace across cells, captures what each cell prints (per thread, so threads started by
user code do not write into another cell's output), and talks to the host over one framed protocol
(`protocol`). Its modules, each with one job, in the order they stand on one another:

- `text`: model values shown as text, never raising;
- `protocol`: the frames both ends speak, and the worker's end of the channel;
- `values`: the tagged JSON in which values cross the boundary (decoded within bounds on the host);
- `capture`: each cell's printed output, captured per thread;
- `calls`: ``llm_query``, ``llm_query_batched``, ``rlm_query(_batched)``, ``call_tool`` and the tools;
- `finals`: ``FINAL``, ``FINAL_VAR`` and the answer dict;
- `repl`: the persistent namespace and running a cell in it (`Repl`; the ``local`` sandbox runs it in-process);
- `program`: the process behind the walls and its loop (`main`).

The package is shipped as it is, so its modules import only the standard library and one another, with
relative imports only: whatever name it is loaded under, they find each other. Inside a sandbox it is
the package ``rlm_worker``: the subprocess launcher binds its files read-only and starts
`programs.WORKER_LOADER`, which loads it from that folder (with its bytecode, when valid); Docker and the
cloud sandboxes send its sources in the bootstrap's frame and `programs/bootstrap.py` loads it from memory.
On the host it is this package, which the host's half of the protocol imports for the shared framing.
"""

from __future__ import annotations

from .calls import CALL_ERROR_PREFIX, MAX_TOOL_ARGS_CHARS, HostCalls
from .capture import ROUTING, CellOutput, RoutedStream, StreamRouting
from .finals import AnswerDict, Finals
from .program import main
from .protocol import (
    HEADER,
    MAX_FRAME_BYTES,
    MAX_FRAME_VALUES,
    BudgetExhaustedError,
    CallFailed,
    ProtocolError,
    WorkerChannel,
    count_values,
    decode_body,
    encode_frame,
    read_frame,
)
from .repl import DEFAULT_CAPTURE_CHARS, RESERVED_NAMES, SESSION_TOOL, Repl, ReplSession
from .values import TAG, BoundExceeded, DecodeBounds, ValueEncodingError, decode_value, encode_value

__all__ = [
    "CALL_ERROR_PREFIX",
    "DEFAULT_CAPTURE_CHARS",
    "HEADER",
    "MAX_FRAME_BYTES",
    "MAX_FRAME_VALUES",
    "MAX_TOOL_ARGS_CHARS",
    "RESERVED_NAMES",
    "ROUTING",
    "SESSION_TOOL",
    "TAG",
    "AnswerDict",
    "BoundExceeded",
    "BudgetExhaustedError",
    "CallFailed",
    "CellOutput",
    "DecodeBounds",
    "Finals",
    "HostCalls",
    "ProtocolError",
    "Repl",
    "ReplSession",
    "RoutedStream",
    "StreamRouting",
    "ValueEncodingError",
    "WorkerChannel",
    "count_values",
    "decode_body",
    "decode_value",
    "encode_frame",
    "encode_value",
    "main",
    "read_frame",
]
