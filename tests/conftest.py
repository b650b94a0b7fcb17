"""Shared fixtures: the local OpenAI-compatible server, scripted models, a clean environment; and the
skipping of test folders and modules whose optional extra is not installed (`tests/extras.py`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters.core.lm.limiter import forget_learned_limits
from rlm_adapters.core.pricing import forget_prices
from rlm_adapters.testing import FakeOpenAIServer
from tests.extras import NEEDS_EXTRA, install_hint, missing_for
from tests.postgres import PostgresServer
from tests.sandbox_required import MARK, check_switch, missing, required

HERE = Path(__file__).parent

# The console scripts (`rlm`, `rlm-mcp`) sit beside the interpreter: `.venv/bin/python -m pytest` without an
# activated venv finds them, and so do the programs the tests start, as in an activated venv.
_SCRIPTS = os.path.dirname(sys.executable)
if _SCRIPTS not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join(filter(None, [_SCRIPTS, os.environ.get("PATH")]))
SKIPPED_FOR_EXTRAS = pytest.StashKey[dict[str, dict[str, str]]]()


def pytest_configure(config: pytest.Config) -> None:
    check_switch()
    config.stash[SKIPPED_FOR_EXTRAS] = {}
    config.addinivalue_line("markers", f"{MARK}(problem, security=False): needs a sandbox launcher or engine")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked `needs_sandbox` whose launcher or engine is missing skips (reported at the test)..."""
    for item in items:
        for mark in item.iter_markers(MARK):
            if mark.args[0] is not None and not required(security=mark.kwargs.get("security", False)):
                item.add_marker(pytest.mark.skip(reason=mark.args[0]))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """... or fails, naming what is missing, under the switch."""
    for mark in item.iter_markers(MARK):
        if mark.args[0] is not None:
            missing(mark.args[0], security=mark.kwargs.get("security", False))


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A folder or module of `NEEDS_EXTRA` whose extra is missing is not imported: it is reported skipped."""
    if not collection_path.is_relative_to(HERE):
        return None
    where = collection_path.relative_to(HERE).as_posix()
    reasons = missing_for(where)
    if not reasons:
        return None
    config.stash[SKIPPED_FOR_EXTRAS][where] = reasons
    nodeid = collection_path.relative_to(config.rootpath).as_posix()
    longrepr = (nodeid, None, "; ".join(reasons))  # no line number: the whole folder or module is skipped
    config.hook.pytest_collectreport(report=pytest.CollectReport(nodeid, "skipped", longrepr, []))
    return True


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    skipped = config.stash[SKIPPED_FOR_EXTRAS]
    if not skipped and config.pluginmanager.hasplugin("dsession"):
        # Under xdist the workers collect, not this process: ask the same question of every entry here.
        skipped = {where: reasons for where in NEEDS_EXTRA if (reasons := missing_for(where))}
    if skipped:
        extras = sorted({extra for reasons in skipped.values() for extra in reasons.values()})
        terminalreporter.write_line(
            f"skipped for missing optional extras: {', '.join(f'tests/{where}' for where in sorted(skipped))}; "
            f"to run them: {install_hint(','.join(extras))}"
        )


@pytest.fixture
def fake_server() -> Iterator[FakeOpenAIServer]:
    """A real OpenAI-compatible HTTP server on 127.0.0.1 (tests set `.root`, `.leaf`, `.latency`)."""
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on 127.0.0.1 for the session (skipped, naming the package, without its binaries)."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.remove()


@pytest.fixture
def store_url(postgres: PostgresServer, request: pytest.FixtureRequest) -> str:
    """The URL (password in it) of a new, empty database of `postgres`, this test's own."""
    return postgres.create_database(f"t{abs(hash(request.node.nodeid)):x}{os.getpid()}")


@pytest.fixture
def keys(store_url: str) -> Iterator[Any]:
    """The keys (a `core.cache.KeyStore`) of this test's store, its pool closed at the end."""
    from rlm_adapters.core.cache import KeyStore, PostgresStore

    database = PostgresStore(store_url)
    yield KeyStore(database)
    database.close()


@pytest.fixture
def open_umask() -> Iterator[None]:
    """The usual umask (022), under which a file or folder made without a mode of its own is 0644 / 0755."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def openai_options(fake_server: FakeOpenAIServer) -> dict[str, object]:
    """RLM keyword arguments pointing the root and sub model at the fake server."""
    url = fake_server.base_url
    return {
        "backend": "openai",
        "backend_kwargs": {
            "model_name": "root-model",
            "base_url": url,
            "api_key": "test-key",
            "max_retries": 0,
        },
        "other_backends": ["openai"],
        "other_backend_kwargs": [
            {"model_name": "leaf-model", "base_url": url, "api_key": "test-key", "max_retries": 0}
        ],
    }


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see real provider settings from the machine they run on."""
    for name in (
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "RLM_MODEL",
        "RLM_SUB_MODEL",
        "RLM_BACKEND",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def _no_document_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Conversions are kept in memory only (a test that wants them on disk names its own folder): nothing is
    written to the user's cache folder, and no test finds what another kept (subprocesses inherit it too)."""
    monkeypatch.setenv("RLM_DOCUMENT_CACHE", "off")
    monkeypatch.delenv("RLM_DOCUMENT_CACHE_SIZE", raising=False)


@pytest.fixture(autouse=True)
def _fresh_concurrency_limits() -> None:
    """Each test's fake server is a new endpoint: no limit learnt by an earlier test carries over."""
    forget_learned_limits()


@pytest.fixture(autouse=True)
def _fresh_prices() -> Iterator[None]:
    """A price one test registers (process-wide) never prices another test's model."""
    yield
    forget_prices()
