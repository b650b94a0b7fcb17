"""Issue 41: a first use of a provider's SDK (or of a sandbox kind) must not hold the host's event loop.

A server runs every client's calls on one loop; an import of seconds done on it stops them all. Each test
injects a slow part (a module that sleeps while it is imported, a slow setup) and counts the ticks of a
heartbeat task while the first use is awaited: on the loop, the heartbeat could not tick at all.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM
from rlm_adapters._extras import is_loaded, require_off_loop
from rlm_adapters.core.lm import _sdk_setup
from rlm_adapters.core.sandbox import factory, open_sandbox
from rlm_adapters.core.sandbox.base import SandboxSetup
from rlm_adapters.core.sandbox.cloud.remote import RemoteSandbox
from rlm_adapters.core.sandbox.cloud.transport import RemoteProcess
from rlm_adapters.core.sandbox.local import LocalSandbox
from rlm_adapters.core.sandbox.subprocess import isolation
from rlm_adapters.core.sandbox.subprocess.sandbox import SubprocessSandbox
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.testing import FakeOpenAIServer

SLOW = 0.3  # seconds each injected part takes
TICK = 0.005
MIN_TICKS = 3  # off the loop, about SLOW / TICK = 60 ticks fit in; on it, none


@pytest.fixture
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Write a module that sleeps `SLOW` seconds while it is imported; returns its name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names: list[str] = []

    def make(name: str, body: str = "") -> str:
        (tmp_path / f"{name}.py").write_text(f"import time\ntime.sleep({SLOW})\n{textwrap.dedent(body)}")
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


async def ticks_while(awaitable: Awaitable[Any]) -> tuple[int, Any]:
    """How many times a heartbeat task ticked while `awaitable` ran, and its result."""
    ticks = 0
    stop = asyncio.Event()

    async def beat() -> None:
        nonlocal ticks
        while not stop.is_set():
            await asyncio.sleep(TICK)
            ticks += 1

    task = asyncio.create_task(beat())
    await asyncio.sleep(0)  # the heartbeat is running before the first use starts
    start = ticks
    try:
        result = await awaitable
    finally:
        stop.set()
        await task
    return ticks - start, result


async def test_the_heartbeat_sees_an_import_on_the_loop(slow_module: Callable[[str], str]) -> None:
    """The measure itself: a plain import on the loop lets the heartbeat tick at most once."""
    name = slow_module("rlm41_on_loop")

    async def on_loop() -> None:
        __import__(name)

    ticks, _ = await ticks_while(on_loop())
    assert ticks <= 1


async def test_require_off_loop_imports_in_a_thread(slow_module: Callable[[str], str]) -> None:
    name = slow_module("rlm41_sdk", "LAZY = 1\n")
    ticks, module = await ticks_while(require_off_loop(name, extra="x", feature="a test", names=["LAZY"]))
    assert ticks >= MIN_TICKS
    assert module.LAZY == 1 and is_loaded(name, ["LAZY"])
    assert not is_loaded(name, ["NOT_THERE"])


async def test_require_off_loop_names_the_extra_of_a_missing_sdk() -> None:
    with pytest.raises(ImportError, match=r"rlm-adapters\[nope\]"):
        await require_off_loop("rlm41_not_installed", extra="nope", feature="a test")


async def test_lazy_names_of_an_sdk_are_loaded_in_the_thread(slow_module: Callable[[str], str]) -> None:
    """An SDK that imports a part on first access (as ``daytona`` does): the access happens in the thread."""
    part = slow_module("rlm41_lazy_part", "VALUE = 2\n")
    sdk = slow_module(
        "rlm41_lazy_sdk",
        f"""
        def __getattr__(name):
            if name != "Part":
                raise AttributeError(name)
            import {part}
            globals()["Part"] = {part}.VALUE
            return globals()["Part"]
        """,
    )
    await require_off_loop(sdk, extra="x", feature="a test")
    assert not is_loaded(sdk, ["Part"])
    ticks, module = await ticks_while(require_off_loop(sdk, extra="x", feature="a test", names=["Part"]))
    assert ticks >= MIN_TICKS and module.Part == 2


class _SlowSDKSandbox(RemoteSandbox):
    """A cloud sandbox whose SDK is the injected slow module; it stops at its credential check."""

    kind = "daytona"

    def __init__(self, sdk: str) -> None:
        super().__init__()
        self.sdk = sdk
        self.loaded_before_create = False

    def _sdk_parts(self) -> tuple[str, tuple[str, ...]]:
        return (self.sdk, ())

    async def _create_remote(self) -> None:
        self.loaded_before_create = is_loaded(self.sdk)
        raise ConfigurationError("no key (the test stops here)")

    async def _run(self, argv: list[str]) -> RemoteProcess:
        raise AssertionError("never reached")

    async def _destroy_remote(self) -> None:
        return None

    def _describe(self) -> str:
        return "a test"


async def test_a_cloud_sandbox_loads_its_sdk_off_the_loop(slow_module: Callable[[str], str], tmp_path: Path) -> None:
    from rlm_adapters.core.context import validate_context

    sandbox = _SlowSDKSandbox(slow_module("rlm41_cloud_sdk"))

    async def answer(kind: str, args: dict[str, Any]) -> str:
        return ""

    async def start() -> None:
        with pytest.raises(ConfigurationError):
            await sandbox.start(SandboxSetup(validate_context("x"), answer, scratch=tmp_path))

    ticks, _ = await ticks_while(start())
    assert ticks >= MIN_TICKS and sandbox.loaded_before_create


async def test_each_cloud_sandbox_names_what_its_start_loads() -> None:
    """Without an injected SDK, every provider hands its SDK to `start`'s thread (e2b and modal only then)."""
    from rlm_adapters.core.sandbox.cloud.daytona import SDK_NAMES, DaytonaSandbox
    from rlm_adapters.core.sandbox.cloud.e2b import E2BSandbox
    from rlm_adapters.core.sandbox.cloud.modal import ModalSandbox
    from rlm_adapters.core.sandbox.cloud.prime import PrimeSandbox

    assert DaytonaSandbox()._sdk_parts() == ("daytona", SDK_NAMES)
    assert PrimeSandbox()._sdk_parts()[0] == "prime_sandboxes"
    assert E2BSandbox()._sdk_parts() == ("e2b", ("AsyncSandbox",))
    assert E2BSandbox(sandbox_factory=lambda **kw: None)._sdk_parts() is None
    assert ModalSandbox()._sdk_parts() is not None and ModalSandbox(sdk=object())._sdk_parts() is None


async def test_open_sandbox_imports_a_kind_and_runs_its_setup_off_the_loop(
    slow_module: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = slow_module(
        "rlm41_sandbox_kind",
        f"""
        import time
        from rlm_adapters.core.sandbox.local import LocalSandbox

        class Slow(LocalSandbox):
            setups = 0

            def blocking_setup(self):
                return None if Slow.setups else self._setup_once

            def _setup_once(self):
                time.sleep({SLOW})
                Slow.setups += 1
        """,
    )
    monkeypatch.setitem(factory._KINDS, "slow", f"{name}:Slow")
    ticks, sandbox = await ticks_while(open_sandbox("slow"))
    assert ticks >= MIN_TICKS * 2  # the import, then the setup
    assert isinstance(sandbox, LocalSandbox) and type(sandbox).setups == 1  # type: ignore[attr-defined]
    # Once loaded and set up, no thread hop: the next sandbox is made on the loop, at once.
    loop_thread = threading.get_ident()
    made_in: list[int] = []
    real = factory.make_sandbox
    monkeypatch.setattr(factory, "make_sandbox", lambda *a: made_in.append(threading.get_ident()) or real(*a))
    await open_sandbox("slow")
    assert made_in == [loop_thread]


async def test_the_first_subprocess_sandbox_probes_isolation_in_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    isolation.forget_probes()
    loop_thread = threading.get_ident()
    probed_in: list[int] = []
    real = isolation._detect

    def detect(*args: Any) -> Any:
        probed_in.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(isolation, "_detect", detect)
    sandbox = await open_sandbox("subprocess", {"isolation": "process"})
    assert isinstance(sandbox, SubprocessSandbox)
    assert len(probed_in) == 1 and probed_in[0] != loop_thread
    assert sandbox.blocking_setup() is None  # proven once per process: later sandboxes skip the thread
    assert isinstance(await open_sandbox("subprocess", {"isolation": "process"}), SubprocessSandbox)
    assert len(probed_in) == 1
    isolation.forget_probes()  # a new sandbox probes again
    assert factory.make_sandbox("subprocess", {"isolation": "process"}).blocking_setup() is not None  # type: ignore[attr-defined]


async def test_a_first_model_call_loads_tls_and_transport_off_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CA bundle (0.04-0.25 s) and the first request's modules load in a thread, before the first request."""

    @functools.cache
    def slow_context() -> ssl.SSLContext:
        time.sleep(SLOW)
        return ssl.create_default_context()

    monkeypatch.setattr(_sdk_setup, "shared_ssl_context", slow_context)
    with FakeOpenAIServer(root=["FINAL(42)"]) as server:
        rlm = RLM(
            backend="openai",
            backend_kwargs={"model_name": "gpt-5", "base_url": server.base_url, "api_key": "k"},
            environment="local",
        )
        ticks, result = await ticks_while(rlm.acompletion("ctx", "q"))
    assert result.response == "42"
    assert ticks >= MIN_TICKS and slow_context.cache_info().currsize == 1
