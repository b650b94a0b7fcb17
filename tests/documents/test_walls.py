"""A converter that tries to reach the network, a host file or the host's keys fails at the walls, at every
level that works here; and the real converter raises them before it reads a document."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rlm_adapters.core.sandbox.subprocess.isolation import level_available
from rlm_adapters.core.sandbox.subprocess.oneshot import OneShotLimits, run_walled

# A stand-in converter: it raises the walls the way programs/converter.py does, then tries what a
# compromised parser would: a TCP connection, a unix socket, reading host files (its parent's environment
# among them, where API keys live), writing outside scratch; and it reports the environment it was given.
ATTACKER = """
import json, os, socket, sys
from importlib.machinery import SourceFileLoader
spec = json.loads(sys.argv[2])
walls = {"__name__": "rlm_walls"}
exec(SourceFileLoader("rlm_walls", spec["module"]).get_code("rlm_walls"), walls)
walls["apply"](spec)
request = json.loads(sys.stdin.buffer.read()[4:])
tried = {}
def attempt(name, action):
    try:
        action()
        tried[name] = "allowed"
    except OSError as exc:
        tried[name] = f"refused ({exc.errno})"
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=2))
attempt("unix", lambda: socket.socket(socket.AF_UNIX).connect("/var/run/docker.sock"))
for path in request["host_files"]:
    attempt("read " + path, lambda path=path: open(path, "rb").read(1))
attempt("write " + request["outside"], lambda: open(request["outside"], "wb").write(b"x"))
attempt("read the document", lambda: open(request["input"], "rb").read(1))
attempt("read the parent's environment", lambda: open(f"/proc/{os.getppid()}/environ", "rb").read(1))
sys.stdout.write(json.dumps({"tried": tried, "environment": dict(os.environ)}))
"""

LEVELS = [
    pytest.param(level, marks=pytest.mark.skipif(not level_available(level, sys.executable), reason=f"no {level} here"))
    for level in ("bwrap", "unshare", "process")
]


@pytest.mark.parametrize("level", LEVELS)
def test_a_converter_reaching_for_the_network_or_host_files_is_stopped(
    level: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-0451")
    program = tmp_path / "attacker.py"
    document = tmp_path / "doc.pdf"
    secret = tmp_path / "host-secret.txt"
    program.write_text(ATTACKER)
    document.write_bytes(b"%PDF-1.7 tiny")
    secret.write_text("host secret")
    outside = tmp_path / "escaped.txt"
    request = {"type": "convert", "host_files": [str(secret), "/etc/passwd"], "outside": str(outside)}
    limits = OneShotLimits(256 * 1024**2, 20.0, 65536)
    run = run_walled(program, request, document, limits, isolation=level)  # type: ignore[arg-type]
    assert run.ending == "exited" and run.returncode == 0, run.stderr
    report = json.loads(run.output)
    tried = report["tried"]
    assert tried.pop("read the document") == "allowed"  # the one host file it is given
    assert set(tried) == {
        "tcp", "unix", f"read {secret}", "read /etc/passwd", f"write {outside}", "read the parent's environment"
    }  # fmt: skip
    assert all(value.startswith("refused") for value in tried.values()), tried
    assert not outside.exists()
    assert "OPENAI_API_KEY" not in report["environment"]
    assert not any("sk-host-secret" in value for value in report["environment"].values())
