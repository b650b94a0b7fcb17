"""`context_preview_chars`: how much of the context's text the root model is shown before it writes code.

The proof that an option is one declaration (`core.settings`) plus its use in the engine: these tests reach it
through `RLM`'s keyword, its attribute, a nested run and its check; `tests/langchain` and `tests/test_cli.py`
through `ChatRLM` and ``rlm ask --context-preview-chars``.
"""

from __future__ import annotations

import pytest

from rlm_adapters import RLM, ConfigurationError, ScriptedModel
from rlm_adapters.core.lm.base import Message
from rlm_adapters.core.settings import DEFAULTS

SECRET = "TOPSECRET-7431"
CONTEXT = SECRET + " and then " + "filler " * 500


class Recorder:
    """A root model that answers at once and keeps the first user message of every conversation it starts."""

    def __init__(self, code: str = "FINAL('done')") -> None:
        self.firsts: list[str] = []
        self.code = code

    def __call__(self, messages: list[Message]) -> str:
        users = [m for m in messages if m["role"] == "user"]
        if len(users) == 1:
            self.firsts.append(str(users[0]["content"]))
        return f"```repl\n{self.code}\n```"


def run(context: object, **options: object) -> Recorder:
    recorder = Recorder()
    rlm = RLM(backend=ScriptedModel(recorder, model_name="root"), environment="local", **options)  # type: ignore[arg-type]
    assert rlm.completion(context, "what is it?").response == "done"
    return recorder


def test_the_default_shows_the_beginning() -> None:
    assert DEFAULTS.context_preview_chars == 400
    (first,) = run(CONTEXT).firsts
    assert f"<preview>\n{CONTEXT[:400]}\n</preview>" in first


def test_zero_shows_the_root_model_no_text_of_the_context() -> None:
    (first,) = run(CONTEXT, context_preview_chars=0).firsts
    assert SECRET not in first and "<preview>" not in first
    assert f"{len(CONTEXT):,} characters" in first  # its size and shape are still there


@pytest.mark.parametrize("context", [CONTEXT, [CONTEXT, "second"], {"k": CONTEXT}])
def test_a_few_characters_show_exactly_those(context: object) -> None:
    (first,) = run(context, context_preview_chars=5).firsts
    preview = first.split("<preview>\n", 1)[1].split("\n</preview>", 1)[0]
    assert len(preview) == 5 and SECRET not in first


def test_a_nested_runs_context_is_previewed_the_same_way() -> None:
    nested = f"rlm_query('what is it?', context={'NESTED-' + SECRET!r} + ' ' * 50)\nFINAL('done')"
    recorder = Recorder(nested)
    child = Recorder()
    rlm = RLM(
        backend=ScriptedModel(recorder, model_name="root"),
        other_backends=[ScriptedModel(child, model_name="sub")],
        environment="local",
        max_depth=2,
        context_preview_chars=0,
    )
    rlm.completion(CONTEXT, "q")
    top, nested_run = recorder.firsts  # the root model of the top-level run, then of the nested one
    assert "3,5" in top and "71 characters" in nested_run
    assert SECRET not in top and SECRET not in nested_run and "<preview>" not in nested_run
    # (At the depth limit the nested run's own rlm_query is a plain sub-call: its prompt is the context.)
    assert any(SECRET in text for text in child.firsts)


def test_it_is_checked_and_an_attribute() -> None:
    with pytest.raises(ConfigurationError, match=r"^context_preview_chars=-1 must be an integer >= 0$"):
        RLM(backend=ScriptedModel(["x"]), context_preview_chars=-1)
    rlm = RLM(backend=ScriptedModel(["x"]))
    rlm.context_preview_chars = 12
    assert rlm.settings.context_preview_chars == 12
    with pytest.raises(ConfigurationError, match="context_preview_chars=True"):
        rlm.context_preview_chars = True
