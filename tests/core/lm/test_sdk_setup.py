"""Per-process SDK set-up (`core/lm/_sdk_setup.py`): one TLS context, the platform handed to each new client.

Both are checked through the real SDKs against the local fake servers: a run's clients send the same
platform header the SDK would have computed, and no call starts the event loop's default executor (the
thread the SDK's ``asyncify(get_platform)`` would start per client and ``asyncio.run`` would join) once the
process's first client has loaded the TLS context and the first request's modules (`warm_up`, in a thread:
issue 41).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import ssl
import subprocess
import sys
import threading
import types
from typing import Any

import openai
import pytest

from rlm_adapters.core.lm import _sdk_setup
from rlm_adapters.core.lm.anthropic_client import AnthropicClient
from rlm_adapters.core.lm.openai_client import OpenAIClient
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_anthropic import FakeAnthropicServer


async def _call_and_check_executor(client: Any) -> Any:
    loop = asyncio.get_running_loop()
    reply = await client.acomplete([{"role": "user", "content": "the magic number is 31337"}])
    # asyncio starts its default executor (a thread) on the first run_in_executor / to_thread.
    assert loop._default_executor is None, "a model call started the loop's default executor"  # type: ignore[attr-defined]
    return reply


def test_openai_clients_get_the_sdk_platform_and_start_no_thread() -> None:
    with FakeOpenAIServer() as server:
        server.keep_requests = True
        first_use = OpenAIClient("leaf", base_url=server.base_url, api_key="k")
        asyncio.run(first_use.acomplete([{"role": "user", "content": "warm up"}]))  # may start a thread, once
        client = OpenAIClient("leaf", base_url=server.base_url, api_key="k")
        reply = asyncio.run(_call_and_check_executor(client))
        headers = server.headers_log[-1]
    assert reply.text == "31337"
    expected = str(openai._base_client.get_platform())
    assert {k.lower(): v for k, v in headers.items()}.get("x-stainless-os") == expected


def test_anthropic_clients_share_the_tls_context_and_start_no_thread() -> None:
    anthropic = pytest.importorskip("anthropic", reason="needs the anthropic extra (the anthropic SDK)")
    with FakeAnthropicServer() as server:
        first = AnthropicClient("claude-haiku-4-5", base_url=server.url, api_key="k")
        second = AnthropicClient("claude-haiku-4-5", base_url=server.url, api_key="k")
        asyncio.run(second.acomplete([{"role": "user", "content": "warm up"}]))  # may start a thread, once
        reply = asyncio.run(_call_and_check_executor(first))
        contexts = [c._connection._client._transport._pool._ssl_context for c in (first, second)]
    assert reply.text
    assert contexts[0] is contexts[1] is _sdk_setup.shared_ssl_context()
    assert first._connection._platform == anthropic._base_client.get_platform()


def test_a_client_that_already_knows_its_platform_keeps_it() -> None:
    sdk_client = openai.AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    sdk_client._platform = "Other:1"  # type: ignore[assignment]
    assert _sdk_setup.preset_platform(sdk_client, "openai")._platform == "Other:1"


def test_an_sdk_without_the_attribute_or_the_function_is_left_alone() -> None:
    class Bare:
        pass

    bare = Bare()
    assert _sdk_setup.preset_platform(bare, "openai") is bare and not hasattr(bare, "_platform")

    class Unknown:
        _platform = None

    unknown = Unknown()
    _sdk_setup.preset_platform(unknown, "no_such_sdk_module")
    assert unknown._platform is None


def test_a_client_begins_the_warm_up_when_built_and_its_first_call_needs_no_thread() -> None:
    # A process whose first client is this one: no TLS context loaded, no warm-up begun.
    _sdk_setup.forget_warm_ups()
    _sdk_setup.shared_ssl_context.cache_clear()
    with FakeOpenAIServer() as server:
        client = OpenAIClient("leaf", base_url=server.base_url, api_key="k")
        _sdk_setup._begun["openai"].result(timeout=30)  # loaded by the thread the client's construction began
        assert _sdk_setup.shared_ssl_context.cache_info().currsize == 1
        OpenAIClient("leaf", base_url=server.base_url, api_key="k")  # a second client begins no second one
        assert list(_sdk_setup._begun) == ["openai"]
        reply = asyncio.run(_call_and_check_executor(client))  # the first call waited for it in no thread
    assert reply.text == "31337"


def test_a_failed_warm_up_is_done_again_by_the_first_call_which_reports_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _sdk_setup.forget_warm_ups()
    _sdk_setup.shared_ssl_context.cache_clear()
    failures: list[str] = []

    def broken(sdk: str, sdk_modules: Any) -> None:
        failures.append(sdk)
        raise ssl_error

    ssl_error = OSError("no CA bundle at /etc/ssl/cert.pem")
    monkeypatch.setattr(_sdk_setup, "_warm", broken)
    _sdk_setup.begin_warm_up("openai")
    with pytest.raises(OSError, match="no CA bundle"):
        asyncio.run(_sdk_setup.warm_up("openai"))
    assert failures == ["openai", "openai"]  # the thread's try, then the call's own
    monkeypatch.undo()
    asyncio.run(_sdk_setup.warm_up("openai"))  # once the bundle is there, the next call loads it
    assert _sdk_setup.shared_ssl_context.cache_info().currsize == 1


def test_a_forked_child_does_not_wait_for_its_parents_warm_up() -> None:
    _sdk_setup.begin_warm_up("openai")
    assert "openai" in _sdk_setup._begun
    pid = os.fork()
    if pid == 0:  # the child: its own warm-ups only (the parent's thread is not in it)
        os._exit(len(_sdk_setup._begun))
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# A fresh interpreter's first client: every TLS context the process makes, and the thread that made it.
_FRESH_PROCESS = """
import sys, threading, time
import httpx2
made = []
original = httpx2.create_ssl_context
def counted(*args, **kwargs):  # a slow CA bundle: the warm-up after the import comes while it loads
    made.append(threading.current_thread().name)
    time.sleep(1.0)
    return original(*args, **kwargs)
httpx2.create_ssl_context = counted
from rlm_adapters.core.lm import _sdk_setup
from rlm_adapters.core.lm.openai_client import OpenAIClient
assert "openai" not in sys.modules, "the SDK was imported before the first client"
OpenAIClient("leaf", api_key="k")
_sdk_setup._begun["openai"].result(timeout=30)
_sdk_setup._warm("openai", ())
print(made)
"""


def test_a_fresh_process_loads_the_tls_context_once_in_a_thread_begun_before_the_sdk_import() -> None:
    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # The load the client began before importing openai; the warm-up after the import waited for it.
    assert done.stdout.split() == ["['rlm-tls-load']"]


def test_once_the_sdk_is_imported_no_tls_load_is_begun_before_it() -> None:
    _sdk_setup.forget_warm_ups()
    _sdk_setup.begin_tls_load("openai")  # imported by this module: the warm-up's thread does it (issue 41)
    assert _sdk_setup._begun == {}


def test_a_failed_tls_load_is_done_again_by_the_first_call_which_reports_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _sdk_setup.forget_warm_ups()
    tries: list[str] = []

    @functools.cache
    def broken() -> ssl.SSLContext:
        tries.append(threading.current_thread().name)
        raise OSError("no CA bundle at /etc/ssl/cert.pem")

    monkeypatch.setattr(_sdk_setup, "shared_ssl_context", broken)
    _sdk_setup.begin_tls_load("an_sdk_this_process_has_not_imported")
    with pytest.raises(OSError, match="no CA bundle"):
        _sdk_setup._begun["(tls)"].result(timeout=30)
    with pytest.raises(OSError, match="no CA bundle"):
        asyncio.run(_sdk_setup.warm_up("openai"))
    assert tries[0] == "rlm-tls-load" and len(tries) == 2  # the thread's try, then the first call's own
    _sdk_setup.forget_warm_ups()


@pytest.fixture(autouse=True)
def _fresh_platform_cache() -> Any:
    _sdk_setup._platform.cache_clear()
    yield
    _sdk_setup._platform.cache_clear()


# A fresh interpreter's first OpenAI and Anthropic clients: the garbage collections during each SDK's import.
_COLLECTIONS = """
import gc, sys
collections = []
gc.callbacks.append(lambda phase, info: phase == "start" and collections.append(info["generation"]))
from rlm_adapters.core.lm import _sdk_setup
from rlm_adapters.core.lm.anthropic_client import AnthropicClient
from rlm_adapters.core.lm.openai_client import OpenAIClient
for name, client in (("openai", OpenAIClient), ("anthropic", AnthropicClient)):
    assert name not in sys.modules, name
    collections.clear()
    client("m", api_key="k")
    _sdk_setup._begun[name].result(timeout=60)  # the warm-up's imports, in its thread
    print(name, len(collections), gc.isenabled())
"""


def test_the_sdks_import_with_the_collector_paused_and_it_comes_back() -> None:
    done = subprocess.run([sys.executable, "-c", _COLLECTIONS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # 150-odd collections, a full one among them, when the collector runs through the import; after the pause
    # the first allocations set off one or two, over all the import made.
    seen = {name: (int(count), enabled) for name, count, enabled in map(str.split, done.stdout.splitlines())}
    assert seen.keys() == {"openai", "anthropic"}
    assert all(count <= 5 and enabled == "True" for count, enabled in seen.values()), seen


def test_pauses_nest_across_threads_end_in_the_oldest_generation_and_leave_a_collector_turned_off_off() -> None:
    assert gc.isenabled()
    first_in, second_out = threading.Event(), threading.Event()

    def second() -> None:
        first_in.wait(10)
        with _sdk_setup.collector_paused():
            pass
        second_out.set()

    thread = threading.Thread(target=second)
    thread.start()
    with _sdk_setup.collector_paused():
        first_in.set()
        assert second_out.wait(10)
        assert not gc.isenabled(), "the other thread's block ended first: the collector stays paused for this one"
    thread.join()
    assert gc.isenabled()
    gc.collect()  # the young generations' counts at zero: only a move can put the block's objects in the oldest
    with _sdk_setup.collector_paused():
        left = [[index] for index in range(5000)]  # a block that loads no module moves nothing
    assert not any(item is left[-1] for item in gc.get_objects(generation=2))
    loaded = f"_rlm_loaded_in_a_pause_{os.getpid()}"
    with _sdk_setup.collector_paused():
        sys.modules[loaded] = types.ModuleType(loaded)  # a module loaded in the block, as an import's are
        made = [[index] for index in range(5000)]  # tracked containers, as an import's are
    del sys.modules[loaded]
    # In the oldest generation, not left for the young collections to scan all at once.
    assert any(item is made[-1] for item in gc.get_objects(generation=2))
    assert gc.get_count()[0] < 700
    gc.disable()
    try:
        with _sdk_setup.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_child_forked_during_a_pause_and_a_block_that_raises_get_the_collector_back() -> None:
    with _sdk_setup.collector_paused():
        pid = os.fork()
        if pid == 0:  # the child: no thread of its own will end the pause
            os._exit(0 if gc.isenabled() else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with pytest.raises(ImportError), _sdk_setup.collector_paused():
        raise ImportError("no module named 'anthropic'")
    assert gc.isenabled()


def test_a_client_built_once_the_sdk_is_loaded_pauses_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server builds a client per run: a pause (and its move of every object to the oldest generation) per run
    would leave young garbage for the rare full collections."""
    _sdk_setup.forget_warm_ups()  # a test before may have left a failed one
    OpenAIClient("m", api_key="k")  # the first ones import what a construction reads, and begin the warm-ups
    AnthropicClient("m", api_key="k")
    for sdk in ("openai", "anthropic"):
        _sdk_setup._begun[sdk].result(timeout=60)
    paused: list[bool] = []

    def recorded() -> Any:
        paused.append(True)
        return contextlib.nullcontext()

    monkeypatch.setattr(_sdk_setup, "collector_paused", recorded)
    OpenAIClient("m", api_key="k")
    AnthropicClient("m", api_key="k")
    assert paused == []
