"""REPL sandboxes behind one protocol, and the one worker program they all run.

This is the sandbox layer's face: the engine (`rlm_adapters.core`) imports only the names below, never a
module of the layer (a test holds it to that). The layer is arranged by launcher: `local` (in-process),
`subprocess/` (a child process behind bubblewrap or unshare), `docker`, `cloud/` (E2B, Modal, Prime,
Daytona); `programs/` holds what is shipped into a sandbox (the worker, its walls, the bootstrap).
"""

from rlm_adapters.core.sandbox.base import (
    BudgetSpent,
    CallError,
    CallHandler,
    CellResult,
    FinalAnswer,
    Sandbox,
    SandboxSetup,
)
from rlm_adapters.core.sandbox.factory import check_kind, make_sandbox, open_sandbox, sandbox_kinds
from rlm_adapters.core.sandbox.programs.worker import (
    CALL_ERROR_PREFIX,
    RESERVED_NAMES,
    SESSION_TOOL,
    ValueEncodingError,
    decode_value,
    encode_value,
)
from rlm_adapters.core.sandbox.reaper import REAPER
from rlm_adapters.core.sandbox.toolargs import decode_tool_args

__all__ = [
    "CALL_ERROR_PREFIX",
    "REAPER",
    "RESERVED_NAMES",
    "SESSION_TOOL",
    "BudgetSpent",
    "CallError",
    "CallHandler",
    "CellResult",
    "FinalAnswer",
    "Sandbox",
    "SandboxSetup",
    "ValueEncodingError",
    "check_kind",
    "decode_tool_args",
    "decode_value",
    "encode_value",
    "make_sandbox",
    "open_sandbox",
    "sandbox_kinds",
]
