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
