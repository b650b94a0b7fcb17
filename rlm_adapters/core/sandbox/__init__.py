"""REPL sandboxes behind one protocol, and the one worker program they all run.

This is the sandbox layer's face: the engine (`rlm_adapters.core`) imports only the names below, never a
module of the layer (a test holds it to that). The layer is arranged by launcher: `local` (in-process),
`subprocess/` (a child process behind bubblewrap or unshare), `docker`, `cloud/` (E2B, Modal, Prime,
Daytona); `programs/` holds what is shipped into a sandbox (the worker, its walls, the bootstrap).
"""

import typing  # a module, not names: the face binds no public name outside `__all__`

from rlm_adapters._lazy import LazyNames as _LazyNames
from rlm_adapters.core.sandbox.base import (
    BudgetSpent,
    CallError,
    CallHandler,
    CellResult,
    FinalAnswer,
    Sandbox,
    SandboxSetup,
)
from rlm_adapters.core.sandbox.factory import check_kind, make_sandbox, open_sandbox, sandbox_kinds, unset_credential
from rlm_adapters.core.sandbox.limits import DEFAULT_CELL_TIMEOUT, describe_exit
from rlm_adapters.core.sandbox.programs import CONVERTER_PATH
from rlm_adapters.core.sandbox.programs.worker import (
    CALL_ERROR_PREFIX,
    RESERVED_NAMES,
    SESSION_TOOL,
    ValueEncodingError,
    decode_value,
    encode_value,
)
from rlm_adapters.core.sandbox.reaper import REAPER
from rlm_adapters.core.sandbox.tempdirs import new_folder
from rlm_adapters.core.sandbox.toolargs import decode_tool_args

if typing.TYPE_CHECKING:
    from rlm_adapters.core.sandbox.programs.walls import SUPPORTED as SECCOMP_SUPPORTED
    from rlm_adapters.core.sandbox.programs.walls import landlock_abi
    from rlm_adapters.core.sandbox.subprocess.bwrap import bundled_bwrap
    from rlm_adapters.core.sandbox.subprocess.bwrap import candidates as bwrap_candidates
    from rlm_adapters.core.sandbox.subprocess.cgroups import writable_mounts
    from rlm_adapters.core.sandbox.subprocess.isolation import (
        PROBE_FAILURES,
        IsolationRequest,
        NoSafeLevel,
        detect_level,
        reaches,
    )
    from rlm_adapters.core.sandbox.subprocess.oneshot import OneShotLimits, OneShotRun, WalledServer, run_walled

# What `rlm doctor` probes and the document converter launches: the local launcher's own parts, loaded on first
# use so that this face (and the engine) starts no launcher.
_ISOLATION = "rlm_adapters.core.sandbox.subprocess.isolation"
_ONESHOT = "rlm_adapters.core.sandbox.subprocess.oneshot"
_WALLS = "rlm_adapters.core.sandbox.programs.walls"
_BWRAP = "rlm_adapters.core.sandbox.subprocess.bwrap"
_LAZY: dict[str, str | tuple[str, str]] = {
    "IsolationRequest": (_ISOLATION, "IsolationRequest"),
    "NoSafeLevel": (_ISOLATION, "NoSafeLevel"),
    "OneShotLimits": (_ONESHOT, "OneShotLimits"),
    "OneShotRun": (_ONESHOT, "OneShotRun"),
    "PROBE_FAILURES": (_ISOLATION, "PROBE_FAILURES"),
    "SECCOMP_SUPPORTED": (_WALLS, "SUPPORTED"),
    "WalledServer": (_ONESHOT, "WalledServer"),
    "bundled_bwrap": (_BWRAP, "bundled_bwrap"),
    "bwrap_candidates": (_BWRAP, "candidates"),
    "detect_level": (_ISOLATION, "detect_level"),
    "landlock_abi": (_WALLS, "landlock_abi"),
    "reaches": (_ISOLATION, "reaches"),
    "run_walled": (_ONESHOT, "run_walled"),
    "writable_mounts": ("rlm_adapters.core.sandbox.subprocess.cgroups", "writable_mounts"),
}

__all__ = [
    "CALL_ERROR_PREFIX",
    "CONVERTER_PATH",
    "DEFAULT_CELL_TIMEOUT",
    "PROBE_FAILURES",
    "REAPER",
    "RESERVED_NAMES",
    "SECCOMP_SUPPORTED",
    "SESSION_TOOL",
    "BudgetSpent",
    "CallError",
    "CallHandler",
    "CellResult",
    "FinalAnswer",
    "IsolationRequest",
    "NoSafeLevel",
    "OneShotLimits",
    "OneShotRun",
    "Sandbox",
    "SandboxSetup",
    "ValueEncodingError",
    "WalledServer",
    "bundled_bwrap",
    "bwrap_candidates",
    "check_kind",
    "decode_tool_args",
    "decode_value",
    "describe_exit",
    "detect_level",
    "encode_value",
    "landlock_abi",
    "make_sandbox",
    "new_folder",
    "open_sandbox",
    "reaches",
    "run_walled",
    "sandbox_kinds",
    "unset_credential",
    "writable_mounts",
]

_NAMES = _LazyNames(__name__, _LAZY, keep=False)
__getattr__ = _NAMES.load
__dir__ = _NAMES.listing
