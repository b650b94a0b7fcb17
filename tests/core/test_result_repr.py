"""A result's repr never holds the context: asyncio.run formats its main task's result on the way out."""

from __future__ import annotations

from rlm_adapters import RLM, ScriptedModel


def test_the_result_repr_leaves_the_context_out_and_prompt_keeps_it() -> None:
    context = "needle " * 50_000
    result = RLM(backend=ScriptedModel(["FINAL(done)"], model_name="m"), environment="local").completion(
        context, root_prompt="q"
    )
    assert result.prompt is context  # the reference's result.prompt: the context as given
    assert "needle needle" not in repr(result)
    assert len(repr(result)) < 5_000
