"""A flood of output without a newline does not freeze the host (issue 24, defect 3), through every provider's fake.

Model code reached the bootstrap's real stdout and wrote 16-48 MiB without a newline: the host's
`LineDecoder` re-split its whole pending buffer on every chunk, the loop froze 20-31 s and a run with
``timeout=60`` took 122-141 s. Now the provider's streams are held by the bootstrap's pump process alone,
and the decoder is linear and bounded. The attack writes to every stream it can open: its own descriptors
(the old bootstrap's copy of the real stdout among them) and, through ``/proc``, fd 1 of every process of
its group (where root can still reach the pump's: this machine's tests run as root, so that bound is
exercised too).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.context import validate_context
from rlm_adapters.core.events import CellExecuted, Event
from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.cloud.transport import MAX_LINE_CHARS
from tests.core.sandbox.cloud.fakes import LocalCommand
from tests.core.sandbox.cloud.test_remote import ATTACKED, Harness, harness  # noqa: F401 (the parametrized fixture)
from tests.core.sandbox.helpers import StallProbe, echo_handler
from tests.security.conftest import DOCKER_OPTIONS, docker_skip_reason

RUN_TIMEOUT = 60.0

FLOOD = """\
import os, sys
size = {size}
print('real_out' in vars(sys.modules['__main__']))
group = os.getpgrp()
members = []
for entry in os.listdir('/proc'):
    if entry.isdigit():
        try:
            if int(open(f'/proc/{{entry}}/stat').read().rsplit(')', 1)[1].split()[2]) == group:
                members.append(entry)
        except (OSError, ValueError):
            pass
own = sorted(int(fd) for fd in os.listdir('/proc/self/fd'))
targets = [f'/proc/self/fd/{{fd}}' for fd in own if fd > 3]  # where the old bootstrap kept the real stdout
targets += [f'/proc/{{pid}}/fd/1' for pid in members]  # the pump's stdout (root still reaches it)
targets += ['/proc/self/fd/1', '/proc/self/fd/2', '/proc/self/fd/3']
piece = b'A' * (1 << 20)
for path in targets:
    try:
        fd = os.open(path, os.O_WRONLY)
        for _ in range(size >> 20):
            os.write(fd, piece)
    except OSError as exc:
        print('unreachable', path, type(exc).__name__)
print('the flood went nowhere')
"""


def _turns(*replies: str) -> Any:
    def reply(messages: list[Message]) -> str:
        return replies[min(sum(m["role"] == "assistant" for m in messages), len(replies) - 1)]

    return reply


def _repl(code: str) -> str:
    return f"```repl\n{code}\n```"


async def _flooded_run(options: dict[str, Any], size: int) -> tuple[Any, list[CellExecuted], StallProbe, float]:
    # A first run imports the provider's SDK and what its fake uses (a blocking import is no flood's doing).
    await RLM(backend=ScriptedModel(_turns(_repl("print(1)"), "FINAL(ok)")), **options).acompletion("c", "q")
    root = ScriptedModel(_turns(_repl(FLOOD.format(size=size)), _repl("print(len(context))"), "FINAL(done)"))
    events: list[Event] = []
    rlm = RLM(backend=root, timeout=RUN_TIMEOUT, **options)
    started = time.monotonic()
    async with StallProbe() as probe:
        result = await rlm.acompletion("the context text", "question", callbacks=[events.append])
    return result, [e for e in events if isinstance(e, CellExecuted)], probe, time.monotonic() - started


def _check(result: Any, cells: list[CellExecuted], probe: StallProbe, took: float) -> None:
    probe.check()
    assert took < RUN_TIMEOUT / 2, f"the run took {took:.1f} s"
    assert (result.finish_reason, result.response) == ("final", "done"), result.error
    first, second = cells
    assert "sent an invalid frame" in (first.error or "") and first.variables_lost, first.error
    assert "the flood went nowhere" not in first.output
    assert second.output.strip() == "16" and second.error is None  # a fresh worker, context loaded


@pytest.mark.parametrize("harness", ATTACKED, indirect=True)
@pytest.mark.parametrize("size", [16 << 20, 48 << 20])
async def test_a_flood_without_newlines_ends_the_cell_on_time(
    harness: Harness,  # noqa: F811
    size: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(LocalCommand, "CHUNK", 1 << 16)  # a provider's usual piece (7 bytes would take minutes)
    options = {"environment": harness.kind, "environment_kwargs": {**harness.options, "cell_timeout": 40}}
    result, cells, stall, took = await _flooded_run(options, size)
    _check(result, cells, stall, took)
    if harness.kind in ("e2b", "daytona"):  # base64 lines: the line bound is what stopped it
        assert f"a stdout line runs past {MAX_LINE_CHARS:,} characters" in (cells[0].error or "")


@pytest.mark.docker
@pytest.mark.slow
async def test_a_flood_without_newlines_ends_the_docker_cell_on_time() -> None:
    if reason := docker_skip_reason():
        pytest.skip(reason)
    options = {"environment": "docker", "environment_kwargs": {**DOCKER_OPTIONS, "cell_timeout": 40}}
    _check(*await _flooded_run(options, 48 << 20))


LIST_DESCRIPTORS = """\
import os, sys
links = []
for fd in os.listdir('/proc/self/fd'):
    try:
        links.append(os.readlink(f'/proc/self/fd/{fd}'))
    except OSError:  # the listing's own descriptor, closed by now
        pass
print(sorted(links))
print([name for name in vars(sys.modules['__main__']) if 'out' in name.lower()])
"""


@pytest.mark.parametrize("harness", ["e2b", "daytona"], indirect=True)
async def test_no_descriptor_of_the_worker_reaches_the_providers_stdout(
    harness: Harness,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The base64 transports: the real stdout is the pump's alone, not the process model code runs in."""
    sandbox = harness.make()
    await sandbox.start(SandboxSetup(validate_context("context"), echo_handler, scratch=tmp_path))
    try:
        command = harness.remote().commands[0]
        assert isinstance(command, LocalCommand)
        transport: Any = command.process._transport  # type: ignore[attr-defined]
        out = transport.get_pipe_transport(1).get_extra_info("pipe").fileno()
        provider_stdout = os.readlink(f"/proc/self/fd/{out}")  # 'pipe:[inode]' of the provider's stream
        listing = await sandbox.execute(LIST_DESCRIPTORS, None)
        assert listing.error is None and provider_stdout.startswith("pipe:")
        assert provider_stdout not in listing.output
        assert "real_out" not in listing.output
    finally:
        await sandbox.aclose()
