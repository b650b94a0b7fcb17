"""What every run's SDK client would otherwise redo: the TLS context, and the platform string of its headers.

Clients are built per run (their connection pools bind to the run's event loop), so anything an SDK builds
per client is paid on every run. Two such costs are process-wide facts, computed once here:

- the TLS context: loading the CA bundle costs 40-250 ms, which `DefaultAsyncHttpxClient()` pays per client;
- the platform of the ``X-Stainless-OS`` header: the OpenAI and Anthropic SDKs compute it on a worker thread
  at each client's first request (``asyncify(get_platform)``), which starts the event loop's default
  executor and its thread, joined again when ``asyncio.run`` ends. The SDK's own `get_platform` is called
  here once (the platform module caches what it reads), and each new client is handed the answer.

Both, and the modules an SDK imports only at its first request (its HTTP transport, its resources), are
loaded by `warm_up` in a worker thread before a process's first request: on the event loop they would stop
every other run of a server for 0.1-0.3 s (issue 41). A client starts that thread as soon as it has imported
its SDK (`begin_warm_up`): loading the CA bundle and the platform's subprocess let go of the GIL, so they go
on while the rest of ``RLM()`` and the run's setup do, and the first call's `warm_up` waits only for what is
left (issue 53). In a process that has not imported the SDK yet, the CA bundle starts loading even earlier,
before the SDK's import (`begin_tls_load`), which takes the calling thread about 0.5 s.

That import (`import_sdk`) runs with the cyclic garbage collector paused, and what it made goes straight to the
collector's oldest generation: the SDK's modules build hundreds of thousands of objects (pydantic models, type
hints) that stay for the process's life. Left to the collector, a cold run spent 45-66 ms collecting (about 150
collections during the import, a full one among them); only paused, 75-80 ms (the first collections after
the pause scanned all of it, young); paused and moved, 13-16 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib
import os
import ssl
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from types import ModuleType
from typing import Any

from rlm_adapters._extras import is_loaded, require


def import_sdk(sdk: str, *modules: str, extra: str | None = None) -> ModuleType:
    """Import the `sdk` package, and its `modules` a client's construction reads, for a client's construction.

    The first time: the CA bundle starts loading first (`begin_tls_load`), the rest of the warm-up after them
    (`begin_warm_up`), and the imports, here and in the warm-up's thread, run with the garbage collector paused
    (`collector_paused`). Once they are loaded, a client's construction (a server builds one per run) does not
    pause the collector at all.

    Raises:
        MissingExtraError: `sdk`, installed by the rlm-adapters `extra` (None: a dependency), is missing.
    """
    if all(is_loaded(name) for name in (sdk, *modules)):  # a later client: no pause, nothing moved
        begin_warm_up(sdk)
        return sys.modules[sdk]
    with collector_paused():
        begin_tls_load(sdk)
        if extra is None:
            package = importlib.import_module(sdk)
        else:
            package = require(sdk, extra=extra, feature=f"the {sdk} backend")
        for module in modules:
            importlib.import_module(module)
    begin_warm_up(sdk)
    return package


_pauses = 0  # the `collector_paused` blocks running now, in any thread
_pauses_lock = threading.Lock()
_resume = False  # whether the collector was on when the first of them began
_modules_before = 0  # how many modules were loaded when the first of them began


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (the SDK's import: objects made to stay, no garbage).

    Blocks in several threads at once nest: the collector comes back when the last ends, and only if it was on
    when the first began (an application that turned it off keeps it off). When the blocks loaded modules, it
    comes back with every object it tracks moved to its oldest generation (`gc.freeze` then `gc.unfreeze`),
    where a full collection would have left what the imports made, so that the next young collections do not
    scan it all. Blocks that loaded nothing (a warm-up whose modules were there) move nothing: a move per run
    would leave a server's young garbage to the rare full collections. Reference counting frees what it frees
    meanwhile; after a move, a cycle that became garbage just before waits for the next full collection.
    """
    global _pauses, _resume, _modules_before
    with _pauses_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            _modules_before = len(sys.modules)
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                if len(sys.modules) > _modules_before:
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()


def _collector_in_child() -> None:
    # A child forked during a pause has no thread to end it: its collector comes back at once.
    global _pauses
    if _pauses:
        _pauses = 0
        if _resume:
            gc.enable()


os.register_at_fork(after_in_child=_collector_in_child)


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context per process, as the SDKs' HTTP library builds it by default."""
    try:  # the HTTP library of these SDK versions: httpx2 (openai >= 3, anthropic >= 2), else httpx
        import httpx2 as http
    except ImportError:
        import httpx as http  # type: ignore[no-redef]
    return http.create_ssl_context()


@functools.cache
def _platform(sdk: str) -> Any:
    """The SDK's own ``get_platform()`` (None when this SDK version has none)."""
    try:
        get_platform = importlib.import_module(f"{sdk}._base_client").get_platform
    except (ImportError, AttributeError):
        return None
    return get_platform()


def preset_platform(client: Any, sdk: str) -> Any:
    """Give a new SDK client (of the `sdk` package) its platform, unless it has one; returns `client`."""
    if getattr(client, "_platform", ...) is None:  # an SDK without this attribute is left as it is
        platform = _platform(sdk)
        if platform is not None:
            client._platform = platform
    return client


def _first_request_modules(sdk_modules: Sequence[str]) -> tuple[str, ...]:
    # What the first request imports besides the SDK's own `sdk_modules`: the transport of the HTTP library.
    core = "httpcore2" if "httpx2" in sys.modules else "httpcore"
    return (core, "h11", "anyio._backends._asyncio", *sdk_modules)


# sdk -> the warm-up `begin_warm_up` started in this process (a child forked meanwhile starts its own);
# `_TLS` -> the TLS context's load `begin_tls_load` started.
_begun: dict[str, Future[None]] = {}
_begun_lock = threading.Lock()
_TLS = "(tls)"


def begin_tls_load(sdk: str) -> None:
    """Before `sdk`'s first import in this process: start loading the TLS context in a daemon thread.

    Loading the CA bundle lets go of the GIL, so it goes on while the calling thread imports the SDK. The
    HTTP library the load needs (httpx2 and its transport, httpcore2: the SDK and its first request import
    them anyway) is imported here, in the calling thread, before the thread starts: the thread then imports
    nothing, and no package is imported by two threads at once (which can fail). Once `sdk` is imported this
    does nothing (importing the transport in the calling thread could then hold an event loop, issue 41);
    `begin_warm_up` loads what is left, in its own thread.
    """
    if sdk in sys.modules or _TLS in _begun:
        return
    try:
        importlib.import_module("httpx2")
        importlib.import_module("httpcore2")
    except ImportError:  # an SDK on httpx: its own warm-up loads the context
        return
    with _begun_lock:
        if _TLS in _begun:
            return
        future: Future[None] = Future()
        _begun[_TLS] = future
    threading.Thread(target=_run_into, args=(future, shared_ssl_context), name="rlm-tls-load", daemon=True).start()


def _run_into(future: Future[None], work: Callable[[], object]) -> None:
    try:
        work()
    except BaseException as exc:  # the first call's `warm_up` does it again in its own thread (and raises)
        future.set_exception(exc)
    else:
        future.set_result(None)


def begin_warm_up(sdk: str) -> None:
    """Start `warm_up`'s work for `sdk` in a daemon thread, once per process (returns at once).

    Call it after `sdk` is imported: the thread imports the SDK's modules, and a package imported by two
    threads at once can fail (each would run against the other's half-made modules). It leaves out the
    SDK's own first-request modules for that reason (a client's construction may be importing them)."""
    with _begun_lock:
        if sdk in _begun:
            return
        future: Future[None] = Future()
        _begun[sdk] = future
    work = functools.partial(_warm, sdk, ())
    threading.Thread(target=_run_into, args=(future, work), name=f"rlm-warm-up-{sdk}", daemon=True).start()


def forget_warm_ups() -> None:
    """Forget the warm-ups `begin_warm_up` and `begin_tls_load` started (the next client starts another; what
    they loaded stays)."""
    with _begun_lock:
        _begun.clear()


# A child forked while a warm-up ran has its future but not its thread: it must not wait for it.
os.register_at_fork(after_in_child=_begun.clear)


async def warm_up(sdk: str, sdk_modules: Sequence[str] = ()) -> None:
    """Before a client of `sdk` is first built: the TLS context, the platform and the modules of a first
    request, loaded in a worker thread (at once, without a thread hop, once they are); what `begin_warm_up`
    started is waited for, not done again."""
    modules = _first_request_modules(sdk_modules)
    if _loaded(modules):
        return
    begun = _begun.get(sdk)
    if begun is not None:
        with contextlib.suppress(Exception):  # it failed: the thread below does it again, and raises
            await asyncio.wrap_future(begun)
        if _loaded(modules):
            return
    await asyncio.to_thread(_warm, sdk, sdk_modules)


def _loaded(modules: Sequence[str]) -> bool:
    return bool(shared_ssl_context.cache_info().currsize) and all(is_loaded(module) for module in modules)


def _warm(sdk: str, sdk_modules: Sequence[str]) -> None:
    loading = _begun.get(_TLS)
    if loading is not None:  # the bundle is loading already: wait for it rather than load it twice
        with contextlib.suppress(Exception):
            loading.result()
    with collector_paused():
        shared_ssl_context()
        _platform(sdk)
        for module in _first_request_modules(sdk_modules):
            # Another SDK version, another layout: its first request imports what it needs.
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
