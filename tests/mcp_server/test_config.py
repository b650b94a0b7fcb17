"""Flags and environment, client roots, the bearer check, and the console entry point."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp_types import ListRootsResult
from starlette.types import Message, Receive, Scope

from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.core.settings import DEFAULTS
from rlm_adapters.errors import ConfigurationError, QueryError
from rlm_adapters.mcp_server import build_server, parse_config
from rlm_adapters.mcp_server.__main__ import main
from rlm_adapters.mcp_server.runs.query import build_rlm
from rlm_adapters.mcp_server.setup.config import DEFAULT_TIMEOUT
from rlm_adapters.mcp_server.transports import BearerTokenMiddleware
from rlm_adapters.testing import FakeOpenAIServer
from rlm_adapters.testing.fake_openai import scripted_root
from tests.mcp_server.conftest import MakeConfig


def test_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = parse_config([], environ={})
    assert config.roots == [tmp_path.resolve()]
    assert config.max_bytes == 512 * 1024**2
    assert (config.sandbox, config.max_depth, config.max_iterations) == ("subprocess", 1, 30)
    assert (config.max_cost, config.timeout) == (None, DEFAULT_TIMEOUT)
    # Not 8000, where the README puts a local vLLM.
    assert (config.http, config.host, config.port, config.token) == (False, "127.0.0.1", 8765, None)
    assert config.use_client_roots


def test_the_rlm_of_a_default_server_has_the_engines_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rlm-mcp restates no engine default; only its timeout is its own (a tool call must end)."""
    monkeypatch.chdir(tmp_path)
    config = parse_config([], environ={})
    rlm = build_rlm(
        config,
        model=None,
        sub_model=None,
        max_depth=None,
        max_cost=None,
        timeout=None,
        backends={"backend": ScriptedModel(["FINAL(x)"], model_name="root")},
    )
    own = dataclasses.replace(DEFAULTS.limits, timeout=DEFAULT_TIMEOUT)
    # A failed run is a tool error built from its result (issue 51), not an exception out of the engine.
    assert rlm.settings == dataclasses.replace(DEFAULTS, limits=own, raise_on_error=False)


def test_flags_win_over_environment(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    environ = {
        "RLM_MCP_ROOTS": str(b),
        "RLM_SANDBOX": "local",
        "RLM_MAX_COST": "0.5",
        "RLM_TIMEOUT": "60",
        "RLM_MCP_TOKEN": "from-env",
        "RLM_MCP_MAX_BYTES": "1000",
        "RLM_MCP_LOG_DIR": str(tmp_path / "logs"),
    }
    config = parse_config(["--root", str(a), "--root", str(b), "--max-cost", "2", "--http", "--port", "9"], environ)
    assert config.roots == [a.resolve(), b.resolve()]
    assert (config.sandbox, config.max_cost, config.timeout) == ("local", 2.0, 60.0)
    assert (config.token, config.max_bytes, config.port, config.http) == ("from-env", 1000, 9, True)
    assert config.log_dir == tmp_path / "logs"
    assert parse_config([], environ).roots == [b.resolve()]


def test_bad_values_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a folder"):
        parse_config(["--root", str(tmp_path / "missing")], environ={})
    with pytest.raises(ConfigurationError, match="RLM_SANDBOX='vm'"):
        parse_config(["--root", str(tmp_path)], environ={"RLM_SANDBOX": "vm"})
    with pytest.raises(ConfigurationError, match="RLM_MAX_COST='lots'"):
        parse_config(["--root", str(tmp_path)], environ={"RLM_MAX_COST": "lots"})


def test_main_reports_a_bad_root_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tmp_path / "missing")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "rlm-mcp: --root" in captured.err


def test_model_kwargs_leave_sub_calls_to_the_root_model_without_a_sub_model(
    tmp_path: Path, fake_server: FakeOpenAIServer
) -> None:
    config = parse_config(["--root", str(tmp_path), "--model", "m"], environ={"OPENAI_BASE_URL": "http://x/v1"})
    options = config.model_kwargs()
    assert options["backend_kwargs"] == {"model_name": "m", "base_url": "http://x/v1"}
    assert "other_backends" not in options  # no second client: the engine falls back to the root's own
    assert config.model_kwargs(sub_model="s")["other_backend_kwargs"][0]["model_name"] == "s"
    # And the engine does: llm_query without a sub-model reaches the root model.
    fake_server.root = scripted_root(["```repl\nFINAL(llm_query('hello'))\n```"])
    served = parse_config(["--root", str(tmp_path), "--model", "m"], environ={"OPENAI_BASE_URL": fake_server.base_url})
    result = RLM(**served.model_kwargs(), environment="local").completion("ctx", root_prompt="q")
    assert result.finish_reason == "final"
    assert fake_server.counters.by_model == {"m": 2}


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # input requests (2026-07-28) and roots/list mid-call
async def test_client_roots_are_allowed_too(
    make_config: MakeConfig, fake_server: FakeOpenAIServer, workspace: Path, mode: str
) -> None:
    fake_server.root = scripted_root(['```repl\nFINAL(context[0]["text"])\n```'])
    outside = workspace.parent / "outside"

    async def roots(context: ClientRequestContext) -> ListRootsResult:
        return ListRootsResult.model_validate({"roots": [{"uri": outside.as_uri(), "name": "outside"}]})

    secret = str(outside / "secret.txt")
    async with Client(build_server(make_config()), list_roots_callback=roots, mode=mode) as client:
        offered = await client.call_tool("rlm_query", {"query": "q", "paths": [secret]})
    config = make_config(use_client_roots=False)
    async with Client(build_server(config), list_roots_callback=roots, mode=mode) as client:
        ignored = await client.call_tool("rlm_query", {"query": "q", "paths": [secret]})
    async with Client(build_server(make_config()), mode=mode) as client:
        none_offered = await client.call_tool("rlm_query", {"query": "q", "paths": [secret]})
    # The preview showed the root model the whole file: it is the answer's source.
    assert offered.content[0].text == "the secret magic number is 9999\n\n\nSources:\n- outside/secret.txt:1"  # type: ignore[union-attr]
    assert ignored.is_error and "outside the allowed roots" in ignored.content[0].text  # type: ignore[union-attr]
    assert none_offered.is_error


async def test_bearer_middleware() -> None:
    calls: list[str] = []

    async def app(scope: Scope, receive: Receive, send: object) -> None:
        calls.append(scope["path"])

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    guarded = BearerTokenMiddleware(app, "t0ken")
    ok: Scope = {"type": "http", "path": "/ok", "headers": [(b"authorization", b"Bearer t0ken")]}
    await guarded(ok, receive, send)
    for headers in ([], [(b"authorization", b"Bearer t0ke")], [(b"authorization", b"t0ken")]):
        await guarded({"type": "http", "path": "/no", "headers": headers}, receive, send)
    await guarded({"type": "lifespan", "path": "/life"}, receive, send)
    assert calls == ["/ok", "/life"]
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [401, 401, 401]


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--max-client-runs", "0"], {}, "--max-client-runs 0 must be an integer >= 1"),
        (["--max-runs", "-3"], {}, "--max-runs -3 must be an integer >= 1"),
        (["--keep-results", "0"], {}, "--keep-results 0 must be an integer >= 1"),
        (["--keep-results-for", "-1"], {}, "--keep-results-for -1.0 must be a positive number of seconds"),
        (["--keep-results-for", "nan"], {}, "--keep-results-for nan must be a positive number of seconds"),
        ([], {"RLM_MCP_KEEP_RESULTS": "many"}, "RLM_MCP_KEEP_RESULTS='many' is not a valid int"),
    ],
)
def test_bad_background_run_limits_are_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], environ: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigurationError) as refused:
        parse_config(["--root", str(tmp_path), *argv], environ=environ)
    assert str(refused.value) == expected
    if not environ:
        assert main(["--root", str(tmp_path), *argv]) == 2
        assert capsys.readouterr().err == f"rlm-mcp: {expected}\n"


def test_background_run_limits_from_flags_and_environment(tmp_path: Path) -> None:
    config = parse_config(
        ["--root", str(tmp_path), "--max-client-runs", "2", "--keep-results-for", "90"],
        environ={"RLM_MCP_MAX_RUNS": "5", "RLM_MCP_KEEP_RESULTS": "7", "RLM_MCP_MAX_CLIENT_RUNS": "9"},
    )
    limits = config.runs
    assert (limits.max_per_client, limits.max_running, limits.keep_results, limits.keep_seconds) == (2, 5, 7, 90.0)
    assert limits.name("max_per_client") == "--max-client-runs"


def test_the_run_timeout_ceiling_has_one_name_and_reads_its_older_one(tmp_path: Path) -> None:
    """``--run-timeout`` / ``RLM_RUN_TIMEOUT`` name the call's wall-clock ceiling; ``--timeout`` / ``RLM_TIMEOUT``
    (public before) still set it, the new variable winning over the old one and any flag over both."""
    assert parse_config(["--root", str(tmp_path), "--run-timeout", "70"], {}).timeout == 70.0
    assert parse_config(["--root", str(tmp_path), "--timeout", "71"], {}).timeout == 71.0
    both = {"RLM_RUN_TIMEOUT": "72", "RLM_TIMEOUT": "73"}
    assert parse_config(["--root", str(tmp_path)], both).timeout == 72.0
    assert parse_config(["--root", str(tmp_path)], {"RLM_TIMEOUT": "73"}).timeout == 73.0
    assert parse_config(["--root", str(tmp_path), "--timeout", "74"], both).timeout == 74.0


def test_a_call_names_its_wall_clock_either_way_but_not_both(tmp_path: Path) -> None:
    config = parse_config(["--root", str(tmp_path), "--run-timeout", "100"], {})
    backends = {"backend": ScriptedModel(["FINAL(x)"], model_name="root")}
    limits = {"model": None, "sub_model": None, "max_depth": None, "max_cost": None, "backends": backends}
    assert build_rlm(config, **limits, run_timeout=30).limits.timeout == 30
    assert build_rlm(config, **limits, timeout=40).limits.timeout == 40
    assert build_rlm(config, **limits).limits.timeout == 100
    with pytest.raises(QueryError, match=r"^give run_timeout=30 or timeout=40, not both"):
        build_rlm(config, **limits, run_timeout=30, timeout=40)
    with pytest.raises(QueryError, match=r"run_timeout=500 is above this server's ceiling of 100.0 \(--run-timeout\)"):
        build_rlm(config, **limits, run_timeout=500)


def test_the_sources_timeout_comes_from_the_flag_the_variable_or_the_options_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_config([], environ={}).sources_timeout == DEFAULTS.sources_timeout
    assert parse_config([], environ={"RLM_SOURCES_TIMEOUT": "2.5"}).sources_timeout == 2.5
    assert parse_config(["--sources-timeout", "4"], environ={"RLM_SOURCES_TIMEOUT": "2.5"}).sources_timeout == 4
    assert parse_config(["--sources-timeout", "0"], environ={}).sources_timeout is None  # no bound
    with pytest.raises(SystemExit):  # argparse's one line, as every flag of every command
        parse_config(["--sources-timeout", "-1"], environ={})
    with pytest.raises(
        ConfigurationError, match=r"^RLM_SOURCES_TIMEOUT='-1': '-1' must be above 0 \(or 0 for no bound\)"
    ):
        parse_config([], environ={"RLM_SOURCES_TIMEOUT": "-1"})


def test_the_direct_route_setting(tmp_path: Path) -> None:
    """``--direct-below-tokens`` / ``RLM_DIRECT_BELOW_TOKENS`` (issue 50): off by default, the flag over the
    variable, a bad value one line naming where it came from, and the engine built with it."""
    root = ["--root", str(tmp_path)]
    assert parse_config(root, environ={}).direct_below_tokens is None
    assert parse_config(root, environ={"RLM_DIRECT_BELOW_TOKENS": "800"}).direct_below_tokens == 800
    config = parse_config([*root, "--direct-below-tokens", "500"], environ={"RLM_DIRECT_BELOW_TOKENS": "800"})
    assert config.direct_below_tokens == 500
    rlm = build_rlm(config, model=None, sub_model=None, max_depth=None, max_cost=None, timeout=None,
                    backends={"backend": ScriptedModel(["FINAL(x)"], model_name="root")})  # fmt: skip
    assert rlm.direct_below_tokens == 500
    with pytest.raises(SystemExit):  # argparse's one line, as every flag of every command
        parse_config([*root, "--direct-below-tokens", "0"], environ={})
    with pytest.raises(ConfigurationError, match="RLM_DIRECT_BELOW_TOKENS='many'"):
        parse_config(root, environ={"RLM_DIRECT_BELOW_TOKENS": "many"})
    with pytest.raises(ConfigurationError, match=r"^RLM_DIRECT_BELOW_TOKENS='-4': -4 is below the minimum of 1"):
        parse_config(root, environ={"RLM_DIRECT_BELOW_TOKENS": "-4"})
