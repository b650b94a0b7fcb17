"""Issue 24, defect 9: a prompt the budget never let out reached no model, so its file is never cited.

On the old code a sub-call's prompt counted as read when the call started, before the budget refused it:
the answer was cited to ``b_never_read.txt:11`` although no request carried that file.
"""

from __future__ import annotations

from rlm_adapters import RLM, ScriptedModel, SubCallSent
from rlm_adapters.sources import SourceTracker

A_LINES = [f"alpha filler line {n} with nothing to report about the alpha module" for n in range(1, 16)]
A_LINES[4] = "the alpha code is ALPHA-1001 and it opens the east door of the depot"
B_LINES = [f"bravo filler line {n} with nothing to report about the bravo module" for n in range(1, 16)]
B_LINES[10] = "the bravo code is BRAVO-2002 and it opens the west door of the depot"
DOCUMENTS = [
    {"id": "a.txt", "text": "\n".join(A_LINES) + "\n"},
    {"id": "b_never_read.txt", "text": "\n".join(B_LINES) + "\n"},
]
# One batch: a short prompt the budget lets out, and a long one (the whole of b, 40 times) it cannot.
ROOT = [
    """```repl
a, b = context[0]["text"], context[1]["text"]
replies = llm_query_batched(["Is this a code line? " + a.splitlines()[4], "Find the code: " + b * 40])
print(replies[1][:40])
FINAL("The codes are ALPHA-1001 and BRAVO-2002.")
```"""
]


async def test_a_batch_cut_by_the_budget_does_not_cite_the_prompt_never_sent() -> None:
    sent: list[str] = []
    rlm = RLM(
        backend=ScriptedModel(ROOT, model_name="root"),
        other_backends=[ScriptedModel(["yes"] * 4, model_name="leaf")],
        environment="local",
        max_sub_tokens=2_000,
    )
    tracker = SourceTracker(DOCUMENTS, max_output_chars=rlm.max_output_chars)

    def note_sent(event: object) -> None:
        if isinstance(event, SubCallSent):
            sent.append(event.call_id)

    result = await rlm.acompletion(DOCUMENTS, "What are the codes?", callbacks=[tracker.on_event, note_sent])
    assert result.response == "The codes are ALPHA-1001 and BRAVO-2002."
    assert result.usage_summary.sub.calls == 1  # the long prompt never left
    assert [source.location for source in await tracker.asources(result.response)] == ["a.txt:5"]
    assert len(sent) == 1
    await tracker.apply(result)
    flagged = {claim.text: claim.reason for claim in result.claims if not claim.supported}
    assert flagged == {
        "BRAVO-2002": "in the input (b_never_read.txt:11) but in no text that reached a model",
    }
