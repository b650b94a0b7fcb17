"""The break-out suite's attacks that a fake provider can host, run against modal, prime and daytona.

The fakes run the worker as a plain local process: the walls a provider puts around its machine (file
system, network, PID namespace) are the provider's and cannot be tested here. What is tested is everything
this library enforces itself, on the host and in the worker: secrets staying on the host, the budget held
against forged frames, malformed and cut frames, the worker's memory / CPU / file-size / wall limits, output
caps, crashes and exits, and no process left once the sandbox is closed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from tests.core.sandbox.cloud.test_remote import ATTACKED, Harness, harness  # noqa: F401 (the parametrized fixture)
from tests.core.sandbox.helpers import descendants
from tests.security.attacks import ATTACKS, Attack, HostCanaries, assert_contained
from tests.security.conftest import SUBPROCESS_LIMITS, budget_handler, canaries  # noqa: F401 (a fixture)

HOSTABLE = {
    "read_own_environ",
    "memory_growth",
    "busy_loop",
    "busy_loop_ignoring_sigxcpu",
    "sleep_forever",
    "print_100_mb",
    "write_raw_bytes_to_fd_1",
    "forged_call_frames_over_budget",
    "frame_cut_in_half",
    "deep_recursion",
    "sys_exit",
    "os_exit",
    "ctypes_segfault",
    "thread_left_running",
    "big_file_in_scratch",
}
LIMITS = {k: v for k, v in SUBPROCESS_LIMITS.items() if k != "process_limit"}  # a provider's machine sets that
# The attacks forge frames on fd 3, the subprocess worker's protocol stream; in a remote worker it is the
# stream its channel writes to.
PROTOCOL_FD = "[o for o in __import__('gc').get_objects() if type(o).__name__ == 'WorkerChannel'][0]._out.fileno()"


@pytest.fixture
async def attacked(harness: Harness, canaries: HostCanaries) -> AsyncIterator[RemoteSandbox]:  # noqa: F811
    before = set(descendants())
    sandbox = harness.make(**LIMITS)
    setup = SandboxSetup(
        validate_context("the original context"), budget_handler(canaries), scratch=canaries.context_file.parent
    )
    await sandbox.start(setup)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()
    assert set(descendants()) - before == set(), "closing the sandbox left a process behind"
    assert harness.service.live() == []


@pytest.mark.parametrize("harness", ATTACKED, indirect=True)
@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.name in HOSTABLE], ids=lambda a: a.name)
async def test_attack_is_contained(attacked: RemoteSandbox, attack: Attack, canaries: HostCanaries) -> None:  # noqa: F811
    code = canaries.fill(attack.code.replace("os.write(3,", f"os.write({PROTOCOL_FD},"))
    await assert_contained(attacked, attack, code, canaries)


def test_every_hostable_attack_exists() -> None:
    names: set[Any] = {a.name for a in ATTACKS}
    assert names >= HOSTABLE
