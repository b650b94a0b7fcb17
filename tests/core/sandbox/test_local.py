"""The ``local`` sandbox shares the host's process: its stream routing is held while it is open, then undone."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.local import LocalSandbox
from rlm_adapters.core.sandbox.programs.worker import ROUTING, RoutedStream


async def _no_calls(kind: str, args: dict[str, Any]) -> None:
    return None


@pytest.fixture(autouse=True)
def no_routing_left() -> Iterator[None]:
    ROUTING.reset()
    yield
    ROUTING.reset()


def own_stdout(monkeypatch: pytest.MonkeyPatch) -> io.BytesIO:
    """Give the host a stdout of this test's own (bytes under a text layer, as a terminal's).

    Set in the test's body: pytest puts its own capture back at the start of each test phase.
    """
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="utf-8", write_through=True))
    return raw


async def _started(tmp_path: Path) -> LocalSandbox:
    sandbox = LocalSandbox(cell_timeout=10.0)
    await sandbox.start(SandboxSetup(validate_context("ctx"), _no_calls, scratch=tmp_path))
    return sandbox


def test_a_local_run_gives_the_host_its_streams_back(capfd: pytest.CaptureFixture[str]) -> None:
    """The bug: after a local run, ``sys.stdout`` stayed a router without ``.buffer`` for the rest of the process."""
    before = sys.stdout, sys.stderr
    code = "```repl\nprint('inside')\nFINAL('ok')\n```"
    result = RLM(backend=ScriptedModel([code]), environment="local").completion("ctx", "q")
    assert result.response == "ok"
    assert (sys.stdout, sys.stderr) == before and not isinstance(sys.stdout, RoutedStream)
    sys.stdout.buffer.write(b"bytes after the run\n")  # what failed: AttributeError on the router
    sys.stdout.flush()
    assert "bytes after the run" in capfd.readouterr().out


async def test_bytes_through_the_buffer_while_a_local_sandbox_is_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_stdout = own_stdout(monkeypatch)
    sandbox = await _started(tmp_path)
    try:
        assert isinstance(sys.stdout, RoutedStream)  # routed while open
        # A host thread, no cell running: straight through to the host's own bytes.
        writer = threading.Thread(target=sys.stdout.buffer.write, args=(b"host bytes\n",))
        writer.start()
        writer.join()
        assert host_stdout.getvalue() == b"host bytes\n"
        # The cell's own bytes are its output, a character split across two writes included.
        cell = await sandbox.execute(
            "import sys\nsys.stdout.buffer.write(b'caf\\xc3')\nsys.stdout.buffer.write(b'\\xa9\\n')\nprint('text')",
            10.0,
        )
        assert cell.error is None and cell.output == "café\ntext\n"
        # A thread model code starts has no capture of its own: with one cell running, that cell's.
        threaded = await sandbox.execute(
            "import sys, threading\nt = threading.Thread(target=sys.stdout.buffer.write, args=(b'from a thread',))\n"
            "t.start()\nt.join()",
            10.0,
        )
        assert threaded.error is None and threaded.output == "from a thread"
        assert host_stdout.getvalue() == b"host bytes\n"  # nothing of the cells reached the host
    finally:
        await sandbox.aclose()
    assert not isinstance(sys.stdout, RoutedStream)


async def test_the_last_local_sandbox_to_close_restores_the_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host_stdout = own_stdout(monkeypatch)
    host = sys.stdout
    first, second = await _started(tmp_path / "a"), await _started(tmp_path / "b")
    assert ROUTING.holders == 2
    await first.aclose()
    await first.aclose()  # twice is safe: one hold, one release
    assert isinstance(sys.stdout, RoutedStream) and ROUTING.holders == 1  # the other one still runs cells
    assert (await second.execute("print('still captured')", 10.0)).output == "still captured\n"
    await second.aclose()
    assert sys.stdout is host and ROUTING.holders == 0
    assert host_stdout.getvalue() == b""


async def test_a_stream_the_host_set_meanwhile_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own_stdout(monkeypatch)
    sandbox = await _started(tmp_path)
    mine = io.StringIO()
    monkeypatch.setattr(sys, "stdout", mine)  # e.g. contextlib.redirect_stdout entered while it was open
    await sandbox.aclose()
    assert sys.stdout is mine


def test_reset_undoes_a_hold_that_was_never_released(monkeypatch: pytest.MonkeyPatch) -> None:
    own_stdout(monkeypatch)
    host = sys.stdout
    ROUTING.hold()
    ROUTING.install()  # a cell re-installs: still one router
    assert isinstance(sys.stdout, RoutedStream) and sys.stdout.fallback is host
    ROUTING.reset()
    assert sys.stdout is host and ROUTING.holders == 0
