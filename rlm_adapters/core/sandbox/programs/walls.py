"""The walls the worker raises around itself before any model code runs: Landlock, seccomp, no capabilities.

Standard library only (ctypes syscalls), loaded by the worker from its file path (``python -I`` puts no
folder of ours on ``sys.path``), so this file must import nothing from this package. Linux only, on
x86_64 and aarch64 (the syscall numbers below). `apply(spec)` raises, in order:

1. ``no_new_privs`` and an empty capability set (bounding set too): root inside ``unshare`` or a plain
   process keeps its uid but loses every privilege, and nothing it executes can regain one. With ``parent``
   (a ``process``-level worker, whose parent is the host itself) the kernel is asked for SIGKILL when the
   host ends (``PR_SET_PDEATHSIG``), and a host already gone is an error.
2. Landlock: read (and execute) only the runtime and the context, write only the scratch folder; TCP
   bind / connect denied (ABI 4+); abstract unix sockets and signals scoped to the sandbox (ABI 6+).
   The kernel's ABI is read and every right it knows is handled, so nothing it can deny is left open.
3. A seccomp filter that refuses ``socket()`` (which also closes pathname unix sockets such as
   ``/var/run/docker.sock``, which Landlock does not cover), io_uring (which could open sockets
   past it), kernel keyrings, SysV IPC and POSIX message queues (the host's, without an IPC
   namespace), ptrace and cross-process memory access, ``bpf``, ``perf_event_open`` and
   ``userfaultfd``; foreign syscall ABIs (x32, 32-bit) are refused wholesale. ``prctl(PR_SET_PDEATHSIG)``
   is refused too: the host's launch asks the kernel to kill the sandbox when the host dies, and model code
   must not be able to take that back (issue 48).

The walls hold for the calling thread and everything it starts afterwards; the worker applies them
while it is still single-threaded. Run as a program (``python walls.py SPEC_JSON``) it applies the
walls, checks that they hold and prints what it applied as JSON: the host's probe.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import struct
import sys

TYPE_CHECKING = False  # `typing` is for type checkers only: it would cost every cold start a few ms
if TYPE_CHECKING:
    from typing import Any

# --------------------------------------------------------------------------------- syscall numbers
_MACHINE = os.uname().machine  # not `platform`: its import costs a cold start several ms
_X86_64 = _MACHINE == "x86_64"
SUPPORTED = sys.platform.startswith("linux") and _MACHINE in ("x86_64", "aarch64")
_AUDIT_ARCH = 0xC000003E if _X86_64 else 0xC00000B7
_NR: dict[str, int] = (
    {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446, "capset": 126}
    if _X86_64
    else {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446, "capset": 91}
)
# Refused by the seccomp filter (x86_64, aarch64).
_DENIED: dict[str, tuple[int, int]] = {
    "socket": (41, 198),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "shmget": (29, 194),
    "shmat": (30, 196),
    "shmctl": (31, 195),
    "semget": (64, 190),
    "semop": (65, 193),
    "semctl": (66, 191),
    "semtimedop": (220, 192),
    "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188),
    "msgctl": (71, 187),
    "mq_open": (240, 180),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_getfd": (438, 438),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
}

_PRCTL = 157 if _X86_64 else 167
PR_SET_PDEATHSIG = 1
PR_GET_PDEATHSIG = 2
SIGKILL = 9  # not `signal`: nothing imported that a cold start can do without
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# ----------------------------------------------------------------------------------- Landlock rights
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1
RULE_PATH_BENEATH = 1
CREATE_RULESET_VERSION = 1

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ = FS_READ_FILE | FS_READ_DIR
READ_EXEC = READ | FS_EXECUTE
# Everything in the scratch folder but device nodes (no capability to make them anyway).
READ_WRITE = ((1 << 16) - 1) & ~(FS_MAKE_CHAR | FS_MAKE_BLOCK)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int


class WallError(OSError):
    """A wall that was asked for could not be raised."""


def _call(name: str, *args: Any) -> int:
    result = int(_libc.syscall(ctypes.c_long(_NR[name]), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise WallError(code, f"{name}: {os.strerror(code)}")
    return result


def _prctl(option: int, arg2: int = 0) -> int:
    result = int(_libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)))
    if result < 0:
        code = ctypes.get_errno()
        raise WallError(code, f"prctl({option}): {os.strerror(code)}")
    return result


# ------------------------------------------------------------------------------------ capabilities
def tie_to_parent(parent: int) -> None:
    """Ask the kernel for SIGKILL when the host that launched this process (`parent`) ends.

    Raises:
        WallError: The request failed, or the host ended before it was made (its signal is then lost).
    """
    _prctl(PR_SET_PDEATHSIG, SIGKILL)
    if os.getppid() != parent:
        raise WallError(errno.ESRCH, f"the host (pid {parent}) ended before the sandbox started")


def drop_privileges() -> None:
    """Set no_new_privs and drop every capability: effective, permitted, inheritable, ambient, bounding."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    for cap in range(64):
        try:
            _prctl(PR_CAPBSET_DROP, cap)
        except WallError as exc:
            # EINVAL: past the last capability this kernel knows. EPERM: no CAP_SETPCAP, so this
            # process holds no capability to drop and, with no_new_privs, can gain none.
            if exc.errno in (errno.EINVAL, errno.EPERM):
                break
            raise
    try:
        _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except WallError as exc:
        if exc.errno != errno.EINVAL:
            raise
    header = struct.pack("=Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)  # two (effective, permitted, inheritable) triples, all empty
    _call("capset", ctypes.c_char_p(header), ctypes.c_char_p(data))


# --------------------------------------------------------------------------------------- Landlock
def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers; 0 when it has none (or it is disabled)."""
    if not SUPPORTED:
        return 0
    try:
        return _call("landlock_create_ruleset", None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except WallError:
        return 0


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]


def landlock(read: list[str], write: list[str], read_exec: list[str], write_files: list[str]) -> int:
    """Restrict this thread (and what it starts) to the listed paths; returns the ABI used.

    Args:
        read: Folders or files readable (not executable).
        write: Folders readable and writable (everything below them).
        read_exec: Folders or files readable and executable (the runtime).
        write_files: Single files readable and writable (e.g. ``/dev/null``).

    Raises:
        WallError: The kernel has no Landlock, or a rule could not be added.
    """
    abi = landlock_abi()
    if abi < 1:
        raise WallError(errno.ENOSYS, "Landlock is not available in this kernel")
    handled_fs = _fs_rights(abi)
    attr = struct.pack("=Q", handled_fs)
    if abi >= 4:
        attr += struct.pack("=Q", NET_BIND_TCP | NET_CONNECT_TCP)  # no rule grants any port
    if abi >= 6:
        attr += struct.pack("=Q", SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
    ruleset = _call("landlock_create_ruleset", ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    try:
        for paths, rights in ((read, READ), (read_exec, READ_EXEC), (write, READ_WRITE), (write_files, READ_WRITE)):
            for path in paths:
                _allow(ruleset, path, rights & handled_fs)
        _call("landlock_restrict_self", ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # nothing there to allow (e.g. /lib32 on this system)
    try:
        if not os.path.isdir(path):
            rights &= _FILE_ONLY
        beneath = struct.pack("=Qi", rights, fd)
        _call("landlock_add_rule", ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), ctypes.c_char_p(beneath),
              ctypes.c_uint32(0))  # fmt: skip
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------- seccomp
def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def seccomp_filter() -> bytes:
    """The BPF program: refuse the `_DENIED` syscalls, ``prctl(PR_SET_PDEATHSIG)`` (EPERM) and foreign ABIs;
    allow the rest."""
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    first_argument = 16  # offsetof(struct seccomp_data, args[0]): its low 32 bits, the kernel's int option
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM
    numbers = sorted({pair[0 if _X86_64 else 1] for pair in _DENIED.values()})
    prog = [_bpf(load, 0, 0, 4), _bpf(jeq, 1, 0, _AUDIT_ARCH), _bpf(ret, 0, 0, deny), _bpf(load, 0, 0, 0)]
    if _X86_64:
        prog.append(_bpf(jge, 0, 1, 0x40000000))  # x32 syscalls
        prog.append(_bpf(ret, 0, 0, deny))
    # prctl: refused for PR_SET_PDEATHSIG (the tie to the host), allowed for every other option.
    prog.append(_bpf(jeq, 0, 4, _PRCTL))
    prog.append(_bpf(load, 0, 0, first_argument))
    prog.append(_bpf(jeq, 0, 1, PR_SET_PDEATHSIG))
    prog.append(_bpf(ret, 0, 0, deny))
    prog.append(_bpf(ret, 0, 0, allow))
    for index, number in enumerate(numbers):
        # Jump over the remaining comparisons and the "allow" to the final "deny" on a match.
        prog.append(_bpf(jeq, len(numbers) - index, 0, number))
    return b"".join([*prog, _bpf(ret, 0, 0, allow), _bpf(ret, 0, 0, deny)])


def seccomp() -> int:
    """Install `seccomp_filter` (needs no_new_privs); returns how many syscalls it refuses."""
    program = seccomp_filter()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    _prctl_ptr(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog)
    return len(_DENIED)


def _prctl_set_pdeathsig(signal_number: int) -> int:
    """``prctl(PR_SET_PDEATHSIG, signal_number)``'s result (0, or -1 when refused)."""
    zero = ctypes.c_ulong(0)
    return int(_libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal_number), zero, zero, zero))


def _prctl_ptr(option: int, arg2: int, data: bytes) -> None:
    result = int(_libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_char_p(data), ctypes.c_ulong(0), ctypes.c_ulong(0)))
    if result < 0:
        code = ctypes.get_errno()
        raise WallError(code, f"seccomp: {os.strerror(code)}")


# ------------------------------------------------------------------------------------------- apply
def apply(spec: dict[str, Any]) -> dict[str, Any]:
    """Raise every wall `spec` asks for; returns what was applied.

    Args:
        spec: ``read`` / ``read_exec`` / ``write`` / ``write_files``: path lists for Landlock;
            ``landlock``: "required", "best-effort" or "off"; ``seccomp``: bool; ``parent``: the host's pid,
            when this process is its direct child (`tie_to_parent`).

    Raises:
        WallError: A required wall could not be raised (the worker must then not run any code).
    """
    if not SUPPORTED:
        raise WallError(errno.ENOSYS, f"the sandbox walls need Linux on x86_64 or aarch64, not {_MACHINE}")
    applied: dict[str, Any] = {"landlock": 0, "seccomp": 0}
    if spec.get("parent") is not None:
        tie_to_parent(int(spec["parent"]))  # before the seccomp filter, which refuses it from then on
    drop_privileges()
    mode = spec.get("landlock", "required")
    if mode != "off":
        try:
            applied["landlock"] = landlock(
                list(spec.get("read", [])),
                list(spec.get("write", [])),
                list(spec.get("read_exec", [])),
                list(spec.get("write_files", [])),
            )
        except WallError:
            if mode == "required":
                raise
    if spec.get("seccomp", True):
        applied["seccomp"] = seccomp()
    return applied


def _check(applied: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """What still gets through after `apply` (the probe's proof); empty when every wall holds."""
    import socket

    leaks: list[str] = []
    try:
        socket.socket(socket.AF_UNIX).close()
        leaks.append("socket() allowed")
    except OSError:
        pass
    if applied.get("seccomp") and _prctl_set_pdeathsig(0) == 0:
        leaks.append("prctl(PR_SET_PDEATHSIG) allowed")
    for path in spec.get("forbidden", []):
        try:
            os.listdir(path) if os.path.isdir(path) else open(path, "rb").close()
            leaks.append(f"read {path}")
        except OSError:
            pass
    return leaks


if __name__ == "__main__":
    _spec = json.loads(sys.argv[1])
    try:
        _applied = apply(_spec)
    except OSError as _exc:
        print(json.dumps({"ok": False, "error": str(_exc)}))
        sys.exit(1)
    _leaks = _check(_applied, _spec)
    print(json.dumps({"ok": not _leaks, "leaks": _leaks, **_applied}))
    sys.exit(1 if _leaks else 0)
