"""What a converter sends back is all the host reads of a document, and it reads it bounded.

A parser exploit runs its code inside the converter: these tests play that code. A format module that
attacks from inside the real converter finds the walls already up; a converter program that floods its
output, announces a huge answer, sends garbage, hangs or dies leaves a skipped entry naming what happened,
with the host's buffer capped by the document's text limit.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from rlm_adapters.core.sandbox.programs import CONVERTER_PATH
from rlm_adapters.core.sandbox.subprocess.oneshot import OneShotLimits, run_walled
from rlm_adapters.documents import DocumentLimits, convert_fd, format_of
from rlm_adapters.documents._formats import FORMATS_FOLDER
from rlm_adapters.documents._output import Converted, parse_output
from tests.documents import writers

# A format module as a compromised parser would run it: after the converter loaded it, inside the walls.
EXPLOITED_FORMAT = """
import os, socket

def convert(handle, out):
    def attempt(name, action):
        try:
            action()
            out.line(f"{name}: allowed")
        except OSError as exc:
            out.line(f"{name}: refused")
    attempt("tcp", lambda: socket.create_connection(("127.0.0.1", 9), timeout=2))
    attempt("read host file", lambda: open(os.environ.get("HOST_FILE", HOST_FILE), "rb").read(1))
    attempt("write host folder", lambda: open(HOST_FOLDER + "/escaped.txt", "wb").write(b"x"))
    attempt("unix socket", lambda: socket.socket(socket.AF_UNIX).connect("/var/run/docker.sock"))
    out.line("key in environment: " + str("OPENAI_API_KEY" in os.environ))
"""


def test_code_run_by_a_format_module_meets_the_walls_the_converter_raised_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-0451")
    folder = tmp_path / "format"
    folder.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (folder / "exploited.py").write_text(
        f"HOST_FILE = {str(secret)!r}\nHOST_FOLDER = {str(tmp_path)!r}\n" + EXPLOITED_FORMAT
    )
    document = writers.pdf(tmp_path / "doc.pdf", pages=1)
    request = {
        "type": "convert",
        "format": "pdf",
        "module": str(folder / "exploited.py"),
        "function": "convert",
        "text": str(FORMATS_FOLDER / "_text.py"),
        "paths": [],
        "limits": {"memory_bytes": 512 * 1024**2, "cpu_seconds": 20, "text_bytes": 65536, "places": 10,
                   "expanded_bytes": 1 << 20},
    }  # fmt: skip
    limits = OneShotLimits(512 * 1024**2, 20.0, 1 << 20)
    run = run_walled(CONVERTER_PATH, request, document, limits, libraries=[str(FORMATS_FOLDER), str(folder)])
    assert run.ending == "exited" and run.returncode == 0, run.stderr
    answer = parse_output(run.output, text_bytes=65536, max_places=10)
    assert isinstance(answer, Converted)
    assert answer.text.splitlines() == [
        "tcp: refused",
        "read host file: refused",
        "write host folder: refused",
        "unix socket: refused",
        "key in environment: False",
    ]
    assert not (tmp_path / "escaped.txt").exists()


# Converter programs that misbehave on purpose (each stands in for programs/converter.py).
FLOOD = "import os\nchunk = b'x' * 65536\nwhile True:\n    os.write(1, chunk)\n"
HUGE_HEADER = "import os, struct\nos.write(1, struct.pack('>I', 1 << 31) + b'{')\n"
GARBAGE = "import os\nos.write(1, b'\\x00\\x00\\x00\\x05[1,2]' + b'\\xff' * 100)\n"
HANG = "import time\ntime.sleep(3600)\n"
DIES = "import sys\nsys.stderr.write('Segmentation fault in the parser\\n')\nsys.exit(139)\n"
LIES_ABOUT_ITS_TEXT = (
    "import json, os, struct\n"
    "header = json.dumps({'type': 'document', 'ok': True, 'places': [], 'text_bytes': 10}).encode()\n"
    "os.write(1, struct.pack('>I', len(header)) + header + b'only five')\n"
)

CASES = [
    (FLOOD, "its text is over the cap of 1 MiB per document"),
    (HUGE_HEADER, "the converter's answer was refused (a header of 2,147,483,648 bytes)"),
    (GARBAGE, "the converter's answer was refused (a header that is not a document answer)"),
    (HANG, "converting it took longer than its time limit of 1.5 s"),
    (DIES, "the converter was killed by SIGSEGV: Segmentation fault in the parser"),
    (LIES_ABOUT_ITS_TEXT, "the converter's answer was refused (9 text bytes where it announced 10)"),
]


@pytest.mark.parametrize(("program", "reason"), CASES, ids=["flood", "header", "garbage", "hang", "dies", "lies"])
def test_a_misbehaving_converter_leaves_a_reason_and_a_bounded_host(
    program: str, reason: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "converter.py"
    fake.write_text(program)
    monkeypatch.setattr("rlm_adapters.documents._convert.CONVERTER_PATH", fake)
    document = writers.pdf(tmp_path / "doc.pdf", pages=1)
    fmt = format_of(document.name)
    assert fmt is not None
    limits = DocumentLimits(seconds=1.5, text_bytes=1024**2)
    started = time.monotonic()
    with document.open("rb") as handle:
        outcome = convert_fd(handle.fileno(), fmt, limits)
    assert (outcome.converted, outcome.reason) == (None, reason)
    assert time.monotonic() - started < 1.5 + 8.0


def test_the_host_buffer_of_a_flooding_converter_stops_at_the_text_cap_and_its_header_room(tmp_path: Path) -> None:
    program = tmp_path / "flood.py"
    program.write_text(FLOOD)
    document = tmp_path / "doc.pdf"
    document.write_bytes(b"%PDF-1.7")
    run = run_walled(program, {"type": "convert"}, document, OneShotLimits(256 * 1024**2, 20.0, 3 * 1024**2))
    assert run.ending == "output" and len(run.output) == 3 * 1024**2
    assert sys.getsizeof(run.output) < 3 * 1024**2 + 4096
