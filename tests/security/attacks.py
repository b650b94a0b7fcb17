"""The break-out attacks: model-written code that tries to leave the sandbox, and how to tell it did not.

Each attack's code uses placeholders (``HOST_PORT``, ``HOST_CANARY_FILE``...) replaced by the test's
host-side canaries. `contained(result, canaries)` is True when nothing of the host was reached.
`local` says what the in-process ``local`` sandbox does with it: ``escapes`` (run, and expected to
escape: it is trusted-code-only), ``contained`` (run, and it holds), or a reason to skip (the attack
would take the test process itself down, which is exactly what local does not protect against).
`needs_pid_namespace`: the attack signals or traces host processes, which a PID namespace or Landlock's
signal scope (ABI 6+) stops; without either it is reported as an expected escape, never run against the host.
`process` says what the ``process`` level (never chosen by ``auto``, only explicitly) does with it:
``contained``, or ``escapes: why`` (a strict expected failure, stated in docs/sandboxes.md).
"""

from __future__ import annotations

import re
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlm_adapters.core.sandbox import tempdirs
from rlm_adapters.core.sandbox.base import CellResult, Sandbox
from rlm_adapters.core.sandbox.context_store import CONTEXTS
from rlm_adapters.core.sandbox.programs import WORKER_MODULES

REPO = Path(__file__).resolve().parents[2]
SUB_CALL_BUDGET = 3
MEMORY_LIMIT = 512 * 1024**2  # the limits the suite's sandboxes get (see conftest)
FILE_SIZE_LIMIT = 8 * 1024**2


def _shared_context_intact() -> bool:
    """Every context file the subprocess sandboxes share still holds what the host wrote."""
    return all(path.read_text() == "the original context" for path in CONTEXTS.files())


@dataclass
class HostCanaries:
    """What lives on the host only; an attack that prints any of it has escaped."""

    secret: str
    canary_file: Path
    canary_text: str
    escape_target: Path
    runtime_target: Path
    context_file: Path
    server: socket.socket
    port: int
    host_pid: int
    home_entry: str | None
    host_interfaces: list[str]
    unix_server: socket.socket
    unix_path: Path
    abstract_server: socket.socket
    abstract_name: str
    udp_server: socket.socket
    shm_name: str
    home_target: Path
    project_target: Path
    signals: list[int] = field(default_factory=list)
    approved_calls: int = 0

    def values(self) -> dict[str, str]:
        """Placeholders substituted into attack code (as Python literals)."""
        return {
            "HOST_CANARY_FILE": repr(str(self.canary_file)),
            "HOST_ESCAPE_TARGET": repr(str(self.escape_target)),
            "HOST_RUNTIME_TARGET": repr(str(self.runtime_target)),
            "HOST_CONTEXT_FILE": repr(str(self.context_file)),
            "HOST_PORT": repr(self.port),
            "HOST_PID": repr(self.host_pid),
            "HOST_HOME": repr(str(Path.home())),
            "HOST_PROJECT_FILE": repr(str(REPO / "pyproject.toml")),
            "ESCAPE_INTO_HOME": repr(str(self.home_target)),
            "ESCAPE_INTO_PROJECT": repr(str(self.project_target)),
            "HOST_UNIX_SOCKET": repr(str(self.unix_path)),
            "HOST_ABSTRACT": repr(self.abstract_name),
            "HOST_UDP_PORT": repr(self.udp_server.getsockname()[1]),
            "HOST_SHM_NAME": repr(self.shm_name),
            "HOST_TMP": repr(tempfile.gettempdir()),
            "HOST_RLM_TMP": repr(str(tempdirs.private_folder())),  # where workers' and runs' folders are
            "FILE_SIZE_LIMIT": repr(FILE_SIZE_LIMIT),
        }

    def fill(self, code: str) -> str:
        """Attack code with these canaries in place of its placeholders (longest names first)."""
        for name, value in sorted(self.values().items(), key=lambda item: -len(item[0])):
            code = code.replace(name, value)
        return code

    def connection_arrived(self) -> bool:
        """True if anything connected to the host's listening port or its unix sockets, or sent it a datagram."""
        for server in (self.server, self.unix_server, self.abstract_server):
            try:
                conn, _ = server.accept()
            except (BlockingIOError, TimeoutError):
                continue
            conn.close()
            return True
        try:
            self.udp_server.recvfrom(64)
        except (BlockingIOError, TimeoutError):
            return False
        return True


Check = Callable[[CellResult, HostCanaries], bool]


@dataclass(frozen=True)
class Attack:
    name: str
    code: str
    contained: Check
    local: str = "escapes"
    # After the attack: "survive" (variables kept), "lost" (REPL restarted), "any".
    variables: str = "any"
    needs_pid_namespace: bool = False
    # The cell's wall-time limit, when the attack is meant to hit it (else the sandbox's generous one).
    wall: float | None = None
    process: str = "contained"
    # Only a memory cgroup bounds the sandbox as a whole (RLIMIT_AS binds each process alone).
    needs_memory_cgroup: bool = False


def _text(result: CellResult) -> str:
    return f"{result.output}\n{result.error or ''}"


def no_secret(result: CellResult, c: HostCanaries) -> bool:
    return c.secret not in _text(result)


def no_canary(result: CellResult, c: HostCanaries) -> bool:
    return c.canary_text not in _text(result)


def error_names(*words: str) -> Check:
    def check(result: CellResult, c: HostCanaries) -> bool:
        return result.error is not None and any(w in result.error for w in words)

    return check


def not_connected(result: CellResult, c: HostCanaries) -> bool:
    return "CONNECTED" not in result.output and not c.connection_arrived()


def only_loopback(result: CellResult, c: HostCanaries) -> bool:
    return not any(re.search(rf"'{re.escape(name)}'", result.output) for name in c.host_interfaces)


def no_signal(result: CellResult, c: HostCanaries) -> bool:
    return not c.signals


def budget_held(result: CellResult, c: HostCanaries) -> bool:
    return c.approved_calls <= SUB_CALL_BUDGET


ATTACKS: list[Attack] = [
    Attack("read_etc_shadow", "print(open('/etc/shadow').read())", lambda r, c: "root:" not in r.output),
    Attack("read_host_file", "print(open(HOST_CANARY_FILE).read())", no_canary),
    Attack(
        "list_host_home",
        "import os\nprint(sorted(os.listdir(HOST_HOME)))",
        lambda r, c: c.home_entry is None or repr(c.home_entry) not in r.output,
    ),
    Attack("read_proc1_environ", "print(open('/proc/1/environ', 'rb').read())", no_secret, local="contained"),
    Attack("read_own_environ", "import os\nprint(dict(os.environ))", no_secret),
    Attack(
        "read_parent_environ",
        "import os\nprint(open(f'/proc/{os.getppid()}/environ', 'rb').read())\nprint(os.getenv('RLM_TEST_SECRET'))",
        no_secret,
    ),
    Attack(
        "read_host_pid_environ",
        "import os\nos.environ.update(dict(l.split('=', 1) for l in "
        "open(f'/proc/{HOST_PID}/environ').read().split('\\0') if '=' in l))\n"
        "print(os.environ.get('RLM_TEST_SECRET'), open(f'/proc/{HOST_PID}/cmdline').read())",
        lambda r, c: c.secret not in _text(r) and "pytest" not in r.output,
    ),
    Attack(
        "read_project_files",
        "print(open(HOST_PROJECT_FILE).read())",
        lambda r, c: 'name = "rlm-adapters"' not in r.output,
    ),
    Attack(
        "write_outside_scratch",
        "open(HOST_ESCAPE_TARGET, 'w').write('escaped')",
        lambda r, c: not c.escape_target.exists(),
    ),
    Attack(
        "write_into_runtime",
        "open(HOST_RUNTIME_TARGET, 'w').write('escaped')",
        lambda r, c: not c.runtime_target.exists(),
    ),
    Attack(
        "symlink_to_host_file",
        "import os\nos.symlink(HOST_CANARY_FILE, 'innocent.txt')\nprint(open('innocent.txt').read())",
        no_canary,
        local="skip: local has no scratch folder; it would write into the host's working folder",
    ),
    Attack(
        "tamper_with_context_file",
        "import os\nfor p in (HOST_CONTEXT_FILE, 'context.txt'):\n"
        "    try:\n        open(p, 'w').write('tampered')\n    except OSError as e:\n        print(e)",
        lambda r, c: c.context_file.read_text() == "the original context" and _shared_context_intact(),
        local="skip: local has no scratch folder; it would write into the host's working folder",
    ),
    Attack(
        "tamper_with_the_shared_context_file",  # one file for every run over this context (issue 41)
        "import glob, os\npaths = [*glob.glob(HOST_RLM_TMP + '/rlm-contexts-*/*'), *glob.glob('/opt/rlm/context/*'),\n"
        "         *glob.glob(HOST_RLM_TMP + '/rlm-worker-*/context/*')]\ntry:\n"
        "    paths += {l.split()[5] for l in open('/proc/self/maps') if l.count(' ') >= 5 and 'context' in l}\n"
        "except OSError:\n    pass\nchanged = 0\nfor p in paths:\n"
        "    for attempt in (lambda: open(p, 'w').write('tampered'), lambda: os.truncate(p, 0),\n"
        "                    lambda: (os.chmod(p, 0o666), open(p, 'r+').write('tampered'))):\n"
        "        try:\n            attempt()\n            changed += 1\n        except OSError:\n            pass\n"
        "print('CHANGED', changed, 'of', len(paths))",
        lambda r, c: _shared_context_intact() and "CHANGED 0 of" in r.output,
        local="skip: local runs as the host user in the host's /tmp",
    ),
    Attack(
        "connect_host_port",
        "import socket\ns = socket.create_connection(('127.0.0.1', HOST_PORT), 2)\n"
        "s.sendall(b'hi')\nprint('CONNECTED')",
        not_connected,
    ),
    Attack(
        "connect_host_port_by_name",
        "import socket\ns = socket.create_connection(('localhost', HOST_PORT), 2)\nprint('CONNECTED')",
        not_connected,
    ),
    Attack("list_network_interfaces", "import socket\nprint(socket.if_nameindex())", only_loopback),
    Attack(
        "dns_lookup",
        "import socket\nprint(socket.getaddrinfo('pypi.org', 443))",
        error_names("gaierror", "OSError"),
        local="skip: local has the host's network; whether the name resolves depends on the machine",
    ),
    Attack(
        "docker_socket",
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/var/run/docker.sock')\nprint('CONNECTED')",
        lambda r, c: "CONNECTED" not in r.output,
        local="skip: local reaches the docker socket whenever an engine runs on the host",
    ),
    Attack(
        "subclasses_walk_to_os",
        "g = [k for k in ().__class__.__base__.__subclasses__() if k.__name__ == '_wrap_close'][0]"
        ".__init__.__globals__\nprint(g['environ'].get('RLM_TEST_SECRET'), open(HOST_CANARY_FILE).read())",
        lambda r, c: no_secret(r, c) and no_canary(r, c),
    ),
    Attack(
        "shell_out",
        "import subprocess\nprint(subprocess.run(['/bin/sh', '-c', 'env; cat ' + HOST_CANARY_FILE], "
        "capture_output=True, text=True))",
        lambda r, c: no_secret(r, c) and no_canary(r, c),
    ),
    Attack(
        "fork_bomb",
        "import os, time\npids = []\ntry:\n    while len(pids) < 2000:\n        pid = os.fork()\n"
        "        if pid == 0:\n            time.sleep(60)\n            os._exit(0)\n        pids.append(pid)\n"
        "finally:\n    print('forked', len(pids))",
        lambda r, c: r.error is not None and "forked 2000" not in r.output,
        local="skip: it would fork the test process itself",
        variables="survive",
    ),
    Attack(
        "thread_bomb",
        "import threading, time\nts = []\nwhile len(ts) < 2000:\n"
        "    t = threading.Thread(target=time.sleep, args=(60,), daemon=True)\n    t.start()\n    ts.append(t)",
        error_names("process_limit"),
        local="skip: it would fill the test process with threads",
        variables="survive",
    ),
    Attack(
        "allocate_50_gib",
        "x = bytearray(50 * 1024**3)",
        error_names("memory_limit"),
        local="skip: it would ask the host for 50 GiB",
        variables="survive",
    ),
    Attack(
        "memory_growth",
        "chunks = []\nwhile True:\n    chunks.append(bytearray(64 * 1024**2))",
        error_names("memory_limit", "killed"),
        local="skip: it would fill the host's memory",
    ),
    Attack(
        "busy_loop",
        "while True:\n    pass",
        error_names("cpu_time_limit", "CellTimeout", "time limit", "cell_timeout"),
        local="contained",  # the cell's thread is interrupted at the cell timeout
        variables="survive",
    ),
    Attack(
        "busy_loop_ignoring_sigxcpu",
        "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
        error_names("cell_timeout", "ran out", "signal only works in main thread"),
        local="contained",
        wall=2.0,
    ),
    Attack(
        "sleep_forever",
        "import time\ntime.sleep(10_000)",
        lambda r, c: r.timed_out and ("cell_timeout" in (r.error or "") or "ran out" in (r.error or "")),
        wall=1.5,
        local="skip: local cannot interrupt a C call; the sleeping thread would outlive the test",
        variables="lost",
    ),
    Attack(
        "print_100_mb",
        "print('x' * 100_000_000)",
        lambda r, c: len(r.output) < 20_000 and r.output_chars >= 100_000_000,
        local="contained",
        variables="survive",
    ),
    Attack(
        "write_raw_bytes_to_fd_1",
        "import os\nos.write(1, b'\\x00\\x00\\x00\\x05{\"ty')\nos.write(2, b'noise' * 1000)\nprint('done')",
        lambda r, c: "done" in r.output,
        local="contained",
        variables="survive",
    ),
    Attack(
        "forged_call_frames_over_budget",
        "import os, json, struct, time\nfor i in range(20):\n"
        "    body = json.dumps({'type': 'call', 'id': 10_000 + i, 'kind': 'llm_query', "
        "'args': {'prompt': 'x'}}).encode()\n    os.write(3, struct.pack('>I', len(body)) + body)\n"
        "print([llm_query('legit') for _ in range(5)])",
        budget_held,
        local="skip: local has no frames (calls go straight to the host's budget); fd 3 is the test's own",
    ),
    Attack(
        "frame_cut_in_half",
        "import os, struct\nos.write(3, struct.pack('>I', 1_000_000) + b'{\"type\": \"res')",
        lambda r, c: r.error is not None and r.variables_lost,
        wall=1.5,
        local="skip: local has no frames; fd 3 is the test's own",
        variables="lost",
    ),
    Attack(
        "deep_recursion",
        "def f(n):\n    return f(n + 1)\nf(0)",
        error_names("RecursionError"),
        local="contained",
        variables="survive",
    ),
    Attack(
        "unbounded_recursion_crash",
        "import sys\nsys.setrecursionlimit(10**8)\nnested = []\nfor _ in range(3_000_000):\n"
        "    nested = [nested]\nrepr(nested)",
        lambda r, c: r.error is not None,
        wall=10.0,
        local="skip: it would crash the test process",
    ),
    Attack(
        "sys_exit",
        "import sys\nsys.exit(3)",
        error_names("SystemExit"),
        local="contained",
        variables="survive",
    ),
    Attack(
        "os_exit",
        "import os\nos._exit(3)",
        lambda r, c: r.variables_lost and r.error is not None,
        local="skip: it would end the test process",
        variables="lost",
    ),
    Attack(
        "ctypes_segfault",
        "import ctypes\nctypes.string_at(0)",
        lambda r, c: r.variables_lost and "SIGSEGV" in (r.error or ""),
        local="skip: it would crash the test process",
        variables="lost",
    ),
    Attack(
        "kill_parent",
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('sent')",
        lambda r, c: True,  # the host surviving, checked after every attack, is the containment
        local="skip: it would kill the shell that runs the tests",
        needs_pid_namespace=True,
    ),
    Attack(
        "signal_host_pid",
        "import os, signal\nos.kill(HOST_PID, signal.SIGUSR2)",
        no_signal,
        needs_pid_namespace=True,
    ),
    Attack(
        "signal_every_process",
        "import os, signal\nos.kill(-1, signal.SIGUSR2)",
        no_signal,
        local="skip: as root it would signal every process on the machine",
        needs_pid_namespace=True,
    ),
    Attack(
        "ctypes_ptrace_host",
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('rc', libc.ptrace(16, HOST_PID, None, None), ctypes.get_errno())",
        lambda r, c: "rc -1" in r.output,
        local="skip: attaching to the test process would stop it",
        needs_pid_namespace=True,
    ),
    Attack(
        "thread_left_running",
        "import threading, time\ndef spin():\n    while True:\n        time.sleep(0.01)\n"
        "threading.Thread(target=spin, daemon=True).start()",
        lambda r, c: r.error is None,
        local="skip: the thread would live on in the test process",
        variables="survive",
    ),
    Attack(
        "big_file_in_scratch",
        "open('big.bin', 'wb').write(b'x' * (16 * 1024**2))",
        error_names("file_size_limit"),
        local="skip: local has no file size limit and would write into the working folder",
        variables="survive",
    ),
]

# The break-outs measured in issue 12 at the unshare level (and the memory ones under bubblewrap).
_MIB = 1024**2


def _number(result: CellResult, label: str) -> int | None:
    match = re.search(rf"{label} (\d+)", result.output)
    return int(match.group(1)) if match else None


def _no_shm_left(result: CellResult, c: HostCanaries) -> bool:
    return not (Path("/dev/shm") / c.shm_name).exists()


def _at_most(label: str, limit: int) -> Check:
    """The attack reports at most `limit`, or was ended (a memory cgroup's OOM kill) before it could report."""

    def check(result: CellResult, c: HostCanaries) -> bool:
        found = _number(result, label)
        return found <= limit if found is not None else result.error is not None

    return check


def _no_fill_left(result: CellResult, c: HostCanaries) -> bool:
    left = [p for folder in ("/", "/tmp", "/dev", "/dev/shm") for p in Path(folder).glob(f"{c.shm_name}-fill-*")]
    for path in left:
        path.unlink()
    return not left and _at_most("MiB", MEMORY_LIMIT // _MIB)(result, c)


def _no_planted_context(result: CellResult, c: HostCanaries) -> bool:
    return "PLANTED 0" in result.output or "PLANTED" not in result.output


ISSUE_12_ATTACKS: list[Attack] = [
    Attack(
        "write_home_and_project_folders",
        "for p in (ESCAPE_INTO_HOME, ESCAPE_INTO_PROJECT):\n    try:\n        open(p, 'w').write('escaped')\n"
        "    except OSError as e:\n        print(e)",
        lambda r, c: not c.home_target.exists() and not c.project_target.exists(),
        local="skip: local would write into the host's home and project folders",
    ),
    Attack(
        "connect_unix_socket_in_tmp",
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect(HOST_UNIX_SOCKET)\nprint('CONNECTED')",
        not_connected,
    ),
    Attack(
        "connect_abstract_unix_socket",
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('\\0' + HOST_ABSTRACT)\nprint('CONNECTED')",
        not_connected,
    ),
    Attack(
        "udp_datagram_to_host",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.sendto(b'leak', ('127.0.0.1', HOST_UDP_PORT))\nprint('SENT')",
        lambda r, c: not c.connection_arrived(),  # "SENT" into a network namespace's own loopback reaches nothing
    ),
    Attack(
        "leave_the_pids_cgroup_then_fork",
        "import glob, os, time\nmoved = []\n"
        "for procs in glob.glob('/sys/fs/cgroup/**/cgroup.procs', recursive=True)[:400]:\n"
        "    if 'rlm-' in procs:\n        continue\n    try:\n        open(procs, 'w').write(str(os.getpid()))\n"
        "        moved.append(procs)\n    except OSError:\n        pass\nprint('MOVED', len(moved))\npids = []\n"
        "try:\n    while len(pids) < 200:\n        pid = os.fork()\n        if pid == 0:\n            time.sleep(30)\n"
        "            os._exit(0)\n        pids.append(pid)\nfinally:\n    print('forked', len(pids))",
        lambda r, c: "MOVED 0" in r.output and (_number(r, "forked") or 0) < 64,
        local="skip: it would move the test process between cgroups and fork it",
    ),
    Attack(
        "fill_host_dev_shm",
        "n = 0\ntry:\n    with open('/dev/shm/' + HOST_SHM_NAME, 'wb') as f:\n        while n < 96:\n"
        "            f.write(b'x' * 1024**2)\n            n += 1\nfinally:\n    print('wrote MiB', n)",
        _no_shm_left,
        local="skip: local writes into the host's /dev/shm",
    ),
    Attack(
        "plant_symlink_in_a_spare_context_folder",
        "import glob, os\nplanted = 0\nfor d in glob.glob(HOST_RLM_TMP + '/rlm-worker-*/context'):\n"
        "    for name in ('context.txt', 'context.json'):\n        try:\n"
        "            os.symlink(HOST_ESCAPE_TARGET, os.path.join(d, name))\n            planted += 1\n"
        "        except OSError:\n            pass\nprint('PLANTED', planted)",
        _no_planted_context,
        local="skip: local runs as the host user in the host's /tmp",
    ),
    Attack(
        "four_children_of_400_mb",
        "import os, select, signal, time\nr, w = os.pipe()\nkids = []\nfor i in range(4):\n    pid = os.fork()\n"
        "    if pid == 0:\n        try:\n            block = bytearray(b'\\1') * (400 * 1024**2)\n"
        "            os.write(w, b'h')\n            time.sleep(20)\n        finally:\n            os._exit(0)\n"
        "    kids.append(pid)\nos.close(w)\nreported = 0\ndeadline = time.time() + 8\n"
        "while reported < 4 and time.time() < deadline:\n    if select.select([r], [], [], 0.2)[0]:\n"
        "        data = os.read(r, 8)\n        if not data:\n            break\n        reported += len(data)\n"
        "alive = [p for p in kids if os.waitpid(p, os.WNOHANG) == (0, 0)]\n"
        "print('reported', reported, 'held at once', len(alive) if reported == 4 else min(len(alive), reported))\n"
        "for p in alive:\n    os.kill(p, signal.SIGKILL)\n    os.waitpid(p, 0)",
        _at_most("held at once", MEMORY_LIMIT // (400 * _MIB)),
        local="skip: it would ask the host for 1.6 GB",
        needs_memory_cgroup=True,
    ),
    Attack(
        "write_tmpfs_past_the_memory_limit",
        "import os\ntotal = 0\nfor d in ('/', '/tmp', '/dev', '/dev/shm', '.', HOST_TMP):\n    for i in range(160):\n"
        "        try:\n            with open(os.path.join(d, HOST_SHM_NAME + f'-fill-{i}'), 'wb') as f:\n"
        "                f.write(b'x' * (4 * 1024**2))\n            total += 4\n        except OSError:\n"
        "            break\nprint('MiB', total)\nfor d in ('/', '/tmp', '/dev', '/dev/shm', '.', HOST_TMP):\n"
        "    for i in range(160):\n        try:\n            os.remove(os.path.join(d, HOST_SHM_NAME + f'-fill-{i}'))\n"
        "        except OSError:\n            pass",
        _no_fill_left,
        local="skip: local writes into the host's folders",
        variables="survive",
        process="escapes: no mount namespace, so the scratch folder cannot be a size-capped tmpfs",
    ),
    Attack(
        "many_files_at_the_file_size_limit",
        "total = 0\nfor i in range(24):\n    try:\n        open(f'big-{i}', 'wb').write(b'x' * FILE_SIZE_LIMIT)\n"
        "        total += FILE_SIZE_LIMIT\n    except OSError:\n        break\nprint('MiB', total // 1024**2)",
        _at_most("MiB", FILE_SIZE_LIMIT // _MIB),
        local="skip: local has no file size limit and would write into the working folder",
        variables="survive",
        process="escapes: no mount namespace, so the scratch folder cannot be a size-capped tmpfs",
    ),
]
# Against the walls themselves.
WALL_ATTACKS: list[Attack] = [
    Attack(
        "hard_link_host_file_into_scratch",
        "import os\nos.link(HOST_CANARY_FILE, 'linked.txt')\nprint(open('linked.txt').read())",
        no_canary,
        local="skip: local has no scratch folder; it would link into the host's working folder",
    ),
    Attack(
        "regain_privileges_in_a_new_program",
        "import subprocess, sys\nprint(subprocess.run([sys.executable, '-I', '-S', '-c', \"import os\\n"
        "open('cap-test', 'w').close()\\nos.chown('cap-test', 4242, 4242)\\nprint('CHOWNED')\"], "
        "capture_output=True, text=True).stdout)",
        lambda r, c: "CHOWNED" not in r.output,
        local="skip: local runs as the host user and would write into the working folder",
    ),
]


def _worker_untouched(result: CellResult, c: HostCanaries) -> bool:
    """All the worker's modules were loaded, none of their files could be opened for writing, and the host's
    package could be neither imported nor read (a file-less worker, loaded from memory, counts 0 files)."""
    modules, files = _number(result, "modules"), _number(result, "files")
    reached = any(word in result.output for word in ("WRITABLE", "IMPORTED", "READ"))
    return not reached and modules == len(WORKER_MODULES) and files in (0, modules + 1)


# Against the worker itself: the programs shipped in are read-only, the package that shipped them unreachable.
WORKER_ATTACKS: list[Attack] = [
    Attack(
        "tamper_with_the_worker_or_import_the_host_package",
        "import json, os, sys\n"
        "loaded = [m for n, m in list(sys.modules.items()) if n.partition('.')[0] == 'rlm_worker']\n"
        "files = [m.__file__ for m in loaded if getattr(m, '__file__', None)]\n"
        "files += [json.loads(sys.argv[2])['module']] if files and sys.argv[1:2] == ['--walls'] else []\n"
        "print('modules', len(loaded), 'files', len(files))\nfor path in files:\n    try:\n"
        "        open(path, 'a').close()\n        print('WRITABLE', path)\n    except OSError:\n        pass\n"
        "try:\n    import rlm_adapters\n    print('IMPORTED', rlm_adapters.__file__)\nexcept ImportError:\n    pass\n"
        "folder = os.path.dirname(files[0]) if files else '/'\nwhile folder != os.path.dirname(folder):\n"
        "    folder = os.path.dirname(folder)\n    try:\n"
        "        print('READ', len(open(os.path.join(folder, 'rlm_adapters', '__init__.py')).read()))\n"
        "    except OSError:\n        pass",
        _worker_untouched,
        local="skip: local runs the host's own package in the host's process",
        variables="survive",
    ),
]
ATTACKS += ISSUE_12_ATTACKS + WALL_ATTACKS + WORKER_ATTACKS


async def assert_contained(sandbox: Sandbox, attack: Attack, code: str, canaries: HostCanaries) -> None:
    """Run `code` (the attack, filled in) in a sandbox holding a variable; it must be contained and the
    sandbox must still run code after it, with its variables kept or lost as the attack says."""
    before = await sandbox.execute("survivor = 42", None)
    assert before.error is None
    result = await sandbox.execute(code, attack.wall)
    assert attack.contained(result, canaries), f"{attack.name} escaped: {result.output[:300]!r} {result.error!r}"
    after = await sandbox.execute("print(1 + 1)\nprint('survivor' in globals())", None)
    assert after.error is None and after.output.startswith("2\n"), "the sandbox no longer runs code"
    if attack.variables == "survive":
        assert after.output == "2\nTrue\n" and not result.variables_lost
    elif attack.variables == "lost":
        assert after.output == "2\nFalse\n" and result.variables_lost
