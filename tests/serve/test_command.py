"""``rlm serve``'s flags: bad ones are one line and exit status 2, before anything listens."""

from __future__ import annotations

import pytest

from rlm_adapters.cli import main


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--model", "rlm-mini"], "write NAME=ROOT_MODEL"),
        (["--model", "m=root,max_cost=9"], "above the server's ceiling 1.0 (raise it with --max-cost)"),
        (["--model", "m=root,base_url=http://127.0.0.1:1/v1", "--host", "0.0.0.0"], "is not loopback: set a token"),
        (["--model", "a=r,base_url=http://127.0.0.1:1/v1", "--model", "a=s,base_url=http://127.0.0.1:1/v1"],
         "given twice"),
        ([], "no model to serve"),
    ],
)  # fmt: skip
def test_bad_flags_are_one_line(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RLM_MODEL", "RLM_SERVE_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_no_upstream_key_is_named_as_a_flag_would(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert main(["serve", "--model", "m=gpt-5-mini"]) == 2
    assert "--model m: no OpenAI API key: set OPENAI_API_KEY" in capsys.readouterr().err


def test_a_served_model_with_no_known_price_is_named_before_anything_listens(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run has a cost ceiling, which cannot see an unpriced model's spend: said at start, with the fix."""
    from rlm_adapters.core.pricing import forget_prices
    from rlm_adapters.serve import shutdown

    forget_prices()
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    served: list[object] = []
    monkeypatch.setattr(shutdown, "serve_until_stopped", lambda app, **kwargs: served.append(app) or 0)
    argv = ["serve", "--model", "m=local-x,sub=small-y", "--model", "p=local-x,price=1/2", "--price", "small-y=1,2"]
    with caplog.at_level("WARNING", logger="rlm_adapters.serve"):
        assert main(argv) == 0
    named = [r.getMessage() for r in caplog.records if "no price known" in r.getMessage()]
    assert named == [
        "no price known for model 'local-x': its calls cost 0, so --max-cost cannot stop them; give --price "
        "local-x=INPUT,OUTPUT (US dollars per million tokens), or price= in --model m"
    ]  # small-y is priced by --price, and model p prices local-x itself (named once per process anyway)
    assert len(served) == 1
    forget_prices()
