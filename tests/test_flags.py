"""Every command's flags come from one place (`rlm_adapters.flags`): issue 49 item 4 and issue 51 items 2 and 3.

A newcomer's failing commands: a mistyped flag on each command, ``--environment`` beside ``--sandbox``, a model
with no price under ``--max-cost``; and the ceilings ``rlm serve`` derives, held to the declared minimums.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

import rlm_adapters.mcp_server.setup.config as mcp_config
import rlm_adapters.serve.served_models as serve_models
from rlm_adapters import RLM, ScriptedModel
from rlm_adapters.cli import main
from rlm_adapters.core.adapter_kit import flagged
from rlm_adapters.core.pricing import forget_prices
from rlm_adapters.errors import ConfigurationError
from rlm_adapters.flags import FlagParser, add_option_flags, from_environment
from rlm_adapters.testing import FakeOpenAIServer


def one_error(capsys: pytest.CaptureFixture[str], argv: list[str], run: object = main) -> str:
    """The one line a command line that is refused prints (exit status 2, no usage block)."""
    with pytest.raises(SystemExit) as stop:
        run(argv)  # type: ignore[operator]
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err, err
    return err.rstrip("\n")


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["ask", "--contxt", "f", "q"], "rlm ask: unknown flag --contxt; did you mean --context?"),
        (["ask", "-c", "f", "--max-cots", "1", "q"], "rlm ask: unknown flag --max-cots; did you mean --max-cost?"),
        (["serve", "--max-cots", "1"], "rlm serve: unknown flag --max-cots; did you mean --max-cost?"),
        (["eval", "sniah", "--modle", "x"], "rlm eval: unknown flag --modle; did you mean --model?"),
        (["view", "--folow", "log.jsonl"], "rlm view: unknown flag --folow; did you mean --follow?"),
        (["ask", "--sandbox=lokal", "-c", "f", "q"], None),  # a known flag with a bad value: argparse's line
        (["asc", "-c", "f", "q"], "rlm: unknown command 'asc'; did you mean ask?"),
        (["ask", "-c", "f", "--zzz", "q"], "rlm ask: unknown flag --zzz; rlm ask --help lists the flags"),
    ],
)
def test_a_mistyped_flag_is_named_with_the_closest_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str | None
) -> None:
    said = one_error(capsys, argv)
    if line is None:
        assert said.startswith("rlm ask: argument --sandbox/--environment: invalid choice: 'lokal'"), said
    else:
        assert said == line
    assert "required" not in said


def test_rlm_mcp_names_a_mistyped_flag_too(capsys: pytest.CaptureFixture[str]) -> None:
    said = one_error(capsys, ["--snadbox", "local"], lambda argv: mcp_config.parse_config(argv, {}))
    assert said == "rlm-mcp: unknown flag --snadbox; did you mean --sandbox?"


def test_values_that_look_like_flags_are_not_flags() -> None:
    parser = FlagParser(prog="p")
    parser.add_argument("--max-cost", type=float)
    parser.add_argument("--max-iterations", type=int)
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args(["--max-cost", "-1", "--max-it", "3", "--", "--not-a-flag"])
    assert (args.max_cost, args.max_iterations, args.rest) == (-1.0, 3, ["--not-a-flag"])


def test_the_sandbox_flag_has_one_name_everywhere_and_the_older_one_still_works(tmp_path: Path) -> None:
    from rlm_adapters.cli import build_parser

    for argv in (["ask", "-c", "f", "q"], ["serve"], ["eval", "sniah"]):
        for flag in ("--sandbox", "--environment"):
            assert build_parser().parse_args([*argv, flag, "local"]).environment == "local", (argv, flag)
    for flag in ("--sandbox", "--environment"):
        assert mcp_config.parse_config(["--root", str(tmp_path), flag, "local"], {}).sandbox == "local"


def test_every_command_offers_every_declared_option(tmp_path: Path) -> None:
    """The one builder: a new option declared with a flag reaches ask, eval, rlm-mcp and serve alike."""
    from rlm_adapters.cli import build_parser

    top = build_parser()
    ask, serve, evals = (top.parse_args(argv) for argv in (["ask", "-c", "f", "q"], ["serve"], ["eval", "sniah"]))
    mcp = mcp_config.build_parser().parse_args([])
    for declared in flagged():
        assert hasattr(ask, declared.name) and hasattr(evals, declared.name) and hasattr(mcp, declared.name)
        limit = declared.option.flag is not None and declared.option.flag.limit
        assert hasattr(serve, f"ceiling_{declared.field}" if limit else declared.name), declared.name


def test_serves_ceilings_are_the_declared_limits_with_their_minimums() -> None:
    """Each --model limit takes what RLM takes: the least value RLM refuses, serve refuses too."""
    ceilings = serve_models.Ceilings()
    assert {f for f in vars(ceilings)} == {d.field for d in serve_models.LIMITS.values()}
    for key, declared in serve_models.LIMITS.items():
        cli = declared.option.flag
        assert cli is not None
        least = cli.minimum if key in serve_models.INT_LIMITS else 0.001
        below = cli.minimum - 1 if key in serve_models.INT_LIMITS else 0
        assert serve_models.parse_model(f"m=root,{key}={least}").limits[key] == least
        with pytest.raises(ConfigurationError, match=rf"^--model 'm=root,{key}={below}': {key}="):
            serve_models.parse_model(f"m=root,{key}={below}")
        RLM(backend=ScriptedModel(["x"]), **{key: least})
        with pytest.raises((ConfigurationError, ValueError)):
            RLM(backend=ScriptedModel(["x"]), **{key: below})


def test_a_price_is_a_flag_and_a_key_of_a_served_model(capsys: pytest.CaptureFixture[str]) -> None:
    said = one_error(capsys, ["ask", "-c", "f", "--price", "gpt=abc", "q"])
    assert said == (
        "rlm ask: argument --price: 'gpt=abc' must be MODEL=INPUT,OUTPUT in US dollars per million tokens, "
        "e.g. gpt-5-mini=0.25,2.00"
    )
    model = serve_models.parse_model("m=local,sub=small,price=0.1/0.4,sub_price=0.02/0.05")
    assert model.options == {"prices": {"local": (0.1, 0.4), "small": (0.02, 0.05)}}
    with pytest.raises(ConfigurationError, match=r"price='abc' must be INPUT/OUTPUT"):
        serve_models.parse_model("m=local,price=abc")
    with pytest.raises(ConfigurationError, match=r"unknown key 'prise'; did you mean price\?"):
        serve_models.parse_model("m=local,prise=1/2")


def test_rlm_mcp_reads_each_options_variable_checked_as_its_flag() -> None:
    parser = argparse.ArgumentParser()
    add_option_flags(parser, unset=True)
    args = parser.parse_args(["--max-depth", "2"])
    env = {"RLM_MAX_DEPTH": "3", "RLM_MAX_SUB_CALLS": "7", "RLM_TIMEOUT": "40", "RLM_SANDBOX": "local"}
    assert from_environment(args, env) == {
        "max_depth": 2,
        "max_sub_calls": 7,
        "run_timeout": 40.0,
        "environment": "local",
    }
    with pytest.raises(ConfigurationError, match=r"^RLM_MAX_ROOT_TOKENS='10': 10 is below the minimum of 50$"):
        from_environment(parser.parse_args([]), {"RLM_MAX_ROOT_TOKENS": "10"})


def ask_env(server: FakeOpenAIServer) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLM_"))}
    return {**kept, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "test"}


@pytest.mark.parametrize("priced", [False, True])
def test_a_price_flag_lets_max_cost_stop_a_local_model(
    fake_server: FakeOpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    priced: bool,
) -> None:
    """Unpriced, a local model's calls cost 0 and ``--max-cost`` cannot stop them (said before the first call,
    naming --price); priced with ``--price``, the budget stops the run after the first call."""
    forget_prices()
    monkeypatch.chdir(tmp_path)
    for key, value in ask_env(fake_server).items():
        monkeypatch.setenv(key, value)
    for key in [k for k in os.environ if k.startswith(("OPENAI_", "RLM_")) and k not in ask_env(fake_server)]:
        monkeypatch.delenv(key)
    (tmp_path / "f.txt").write_text("some text to read\n")
    fake_server.root = ["```repl\nprint(len(context))\n```"] * 3 + ["FINAL(done)"]
    # A dollar a million input tokens: the first call (about 900 tokens) fits $0.0015, the second does not.
    price = ["--price", "my-local-model=1,0"] if priced else []
    argv = ["ask", "-c", "f.txt", "--model", "my-local-model", "--max-cost", "0.0015", "-q", *price, "q"]
    code = main([*argv[:-1], "--sandbox", "local", argv[-1]])
    err = capsys.readouterr().err
    warning = (
        "rlm: no price known for model 'my-local-model': its calls cost 0, so --max-cost cannot stop them; give "
        "--price my-local-model=INPUT,OUTPUT (US dollars per million tokens)"
    )
    if priced:
        assert code == 1 and fake_server.counters.requests == 1, err
        assert "no price known" not in err and "ran out of budget" in err
    else:
        assert code == 0 and fake_server.counters.requests == 4, err
        assert err.splitlines()[0] == warning and "prices={" not in err  # the CLI's words, once
    forget_prices()


def test_a_flag_that_would_drive_the_terminal_is_shown_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    """A hostile command line (pasted from a web page) sets no title and forges no second line."""
    said = one_error(capsys, ["ask", "-c", "f", "--\x1b]0;pwned\x07\nrlm: all good", "q"])
    assert said.startswith("rlm ask: unknown flag --\\x1b]0;pwned\\x07\\nrlm: all good;")


def test_serves_price_flag_and_its_model_keys_reach_every_runs_prices() -> None:
    from rlm_adapters.cli.serve import _with_options

    model = serve_models.parse_model("m=local,sub=small,price=0.1/0.4")
    given = {"prices": {"small": (0.02, 0.05), "local": (9.0, 9.0)}, "max_root_tokens": None}
    priced = _with_options(model, given)
    assert priced.options == {"prices": {"small": (0.02, 0.05), "local": (0.1, 0.4)}}  # the model's own key wins
    options = priced.rlm_options(serve_models.Ceilings(), {"OPENAI_API_KEY": "k"})
    assert options["prices"] == {"small": (0.02, 0.05), "local": (0.1, 0.4)} and options["max_cost"] == 1.0


def test_an_mcp_call_with_a_cost_cap_names_its_unpriced_model_in_the_servers_words(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlm_adapters.mcp_server.runs.query import build_rlm

    forget_prices()
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    config = mcp_config.parse_config(["--root", str(tmp_path), "--price", "priced-model=1,2"], {"OPENAI_API_KEY": "k"})
    with caplog.at_level("WARNING", logger="rlm_adapters"):
        build_rlm(config, model="my-local-model", sub_model="priced-model", max_depth=None, max_cost=0.5).close()
    said = [r.getMessage() for r in caplog.records if "no price known" in r.getMessage()]
    assert said == [
        "no price known for model 'my-local-model': its calls cost 0, so --max-cost cannot stop them; give "
        "--price my-local-model=INPUT,OUTPUT (US dollars per million tokens)"
    ]
    forget_prices()


def test_evals_flags_reach_the_rlm_arms_with_the_wall_clock_keyed_as_results_were() -> None:
    from rlm_adapters.cli import build_parser
    from rlm_adapters.cli.eval import _rlm_kwargs

    args = build_parser().parse_args(
        ["eval", "sniah", "--price", "m=1,2", "--run-timeout", "30", "--max-sub-calls", "4"]
    )
    assert _rlm_kwargs(args) == {"prices": {"m": (1.0, 2.0)}, "timeout": 30.0, "max_sub_calls": 4}
    assert _rlm_kwargs(build_parser().parse_args(["eval", "sniah"])) == {}  # the engine's defaults, unkeyed


@pytest.mark.parametrize("value", ["gpt=nan,1", "gpt=1,inf", "gpt=-1,2", "=1,2", "gpt=1", "gpt=1,2,3", "gpt"])
def test_a_price_that_is_no_price_is_refused_in_one_line(capsys: pytest.CaptureFixture[str], value: str) -> None:
    said = one_error(capsys, ["ask", "-c", "f", "--price", value, "q"])
    assert said.startswith(f"rlm ask: argument --price: {value!r} must be MODEL=INPUT,OUTPUT")


@pytest.mark.parametrize("value", ["nan/1", "1/inf", "-1/2", "1", "1/2/3", "", "x/y"])
def test_a_served_models_price_that_is_no_price_is_refused(value: str) -> None:
    with pytest.raises(ConfigurationError, match=r"must be INPUT/OUTPUT|is not key=value"):
        serve_models.parse_model(f"m=gpt,price={value}")
