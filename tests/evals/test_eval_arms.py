import pytest

from rlm_adapters.core.lm.base import LMResponse
from rlm_adapters.core.lm.scripted import ScriptedModel
from rlm_adapters.errors import ConfigurationError, ModelError
from rlm_adapters.evals.arms import ModelSetup, is_context_limit, parse_arms, part_tokens, run_arm, split_parts
from rlm_adapters.evals.tasks.base import Instance
from rlm_adapters.evals.tasks.sniah import SniahTask
from rlm_adapters.evals.tokens import count_tokens
from rlm_adapters.testing import turn_of


@pytest.fixture
def instance() -> Instance:
    return SniahTask().generate(2048, 1, seed=0)[0]


async def test_direct_sends_the_whole_prompt_once_and_prices_the_call(instance, sniah_root):
    root = ScriptedModel(sniah_root, model_name="gpt-5-mini")
    outcome = await run_arm("direct", ModelSetup(root=root), instance)
    assert outcome.status == "ok" and instance.gold[0] in outcome.answer
    assert len(root.calls) == 1
    # S-NIAH is "wrapped": RULER's template around the haystack, ending in the answer prefix.
    assert root.calls[0] == [
        {"role": "user", "content": instance.prompt_head + instance.context + instance.prompt_tail}
    ]
    assert root.calls[0][0]["content"].endswith("mentioned in the provided text is")
    assert outcome.calls == 1 and outcome.input_tokens > 400
    assert outcome.cost == pytest.approx((outcome.input_tokens * 0.25 + outcome.output_tokens * 2.0) / 1e6)
    assert outcome.seconds >= 0


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        ("joined", [{"role": "user", "content": "CTX\n\nQ?"}]),
        ("wrapped", [{"role": "user", "content": "<h>CTX<t>"}]),
        (
            "system",
            [
                {"role": "system", "content": "You are a helpful assistant.\n\nCTX"},
                {"role": "user", "content": "Q?"},
            ],
        ),
    ],
)
async def test_direct_lays_out_the_prompt_as_the_original(layout, expected):
    item = Instance("i", "oolong", 2048, "CTX", "Q?", "g", layout=layout, prompt_head="<h>", prompt_tail="<t>")
    root = ScriptedModel(["Label: x"])
    await run_arm("direct", ModelSetup(root=root), item)
    assert root.calls == [expected]
    truncated = Instance("i", "codeqa", 2048, "CTX", "Q?", "g", layout="wrapped", direct_prompt="cut")
    await run_arm("direct", ModelSetup(root=root), truncated)
    assert root.calls[-1] == [{"role": "user", "content": "cut"}]


async def test_direct_marks_a_context_limit_error(instance):
    def too_long(_messages):
        raise ModelError("This model's maximum context length is 1000 tokens", model="m", status_code=400)

    outcome = await run_arm("direct", ModelSetup(root=ScriptedModel(too_long)), instance)
    assert outcome.status == "context_limit" and outcome.answer == ""


async def test_direct_other_errors_are_errors_not_context_limits(instance):
    def broken(_messages):
        raise ModelError("rate limited", model="m", status_code=429)

    outcome = await run_arm("direct", ModelSetup(root=ScriptedModel(broken)), instance)
    assert outcome.status == "error" and "rate limited" in (outcome.error or "")


async def test_direct_skips_prompts_over_a_known_window(instance, sniah_root):
    root = ScriptedModel(sniah_root)
    outcome = await run_arm("direct", ModelSetup(root=root, context_window=1000), instance)
    assert outcome.status == "context_limit" and root.calls == []


def test_is_context_limit_phrases():
    assert is_context_limit(ModelError("prompt is too long: 250000 tokens", model="claude"))
    assert is_context_limit(ModelError("payload", model="m", status_code=413))
    assert not is_context_limit(ModelError("server error", model="m", status_code=500))


async def test_compaction_notes_with_the_compaction_model_then_answers_with_the_root(instance, sniah_root):
    def notes(messages):
        text = messages[-1]["content"]
        part = text.split("Next part", 1)[1]
        found = [w for w in part.replace(".", " ").split() if w.isdigit() and len(w) == 7]
        previous = text.split("Your notes so far:\n", 1)[1].split("\n\nNext part", 1)[0]
        return previous if not found else f"needle: is: {found[0]}"

    root, sub = ScriptedModel(sniah_root, model_name="root"), ScriptedModel(notes, model_name="nano")
    setup = ModelSetup(root=root, compactor=sub, compaction_tokens=600)
    outcome = await run_arm("compaction", setup, instance)
    parts = outcome.extra["parts"]
    assert parts >= 3 and len(sub.calls) == parts and len(root.calls) == 1
    assert "Notes taken while reading" in root.calls[0][0]["content"]
    assert instance.gold[0] in outcome.answer and outcome.calls == parts + 1


async def test_compaction_under_the_threshold_is_one_direct_call(instance, sniah_root):
    root, sub = ScriptedModel(sniah_root), ScriptedModel(["unused"])
    outcome = await run_arm("compaction", ModelSetup(root=root, compactor=sub, compaction_tokens=10_000), instance)
    assert len(root.calls) == 1 and sub.calls == [] and outcome.status == "ok"


async def test_compaction_fills_the_window_and_notes_with_the_root_by_default(instance):
    root = ScriptedModel(lambda messages: "notes" if "Next part" in messages[-1]["content"] else "Answer: 1")
    setup = ModelSetup(root=root, sub=ScriptedModel(["unused"], model_name="sub"), context_window=1024)
    assert setup.threshold == 1024
    outcome = await run_arm("compaction", setup, instance)
    # 2,048 tokens of context in parts that fill most of a 1,024-token window: 3 parts, then the answer.
    assert outcome.extra["parts"] == 3 and len(root.calls) == 4 and setup.sub.calls == []
    assert all(count_tokens(call[0]["content"]) <= 1024 for call in root.calls)
    assert part_tokens(1024, instance.question) > 1024 // 2


def test_compaction_without_a_known_window_says_how_to_give_one():
    setup = ModelSetup(root=ScriptedModel(["x"], model_name="my-local-model"))
    with pytest.raises(ConfigurationError, match="'my-local-model' is not known: pass --context-window"):
        setup.threshold  # noqa: B018


def test_split_parts_keeps_every_character_and_cuts_at_line_ends():
    text = "".join(f"line {i}\n" for i in range(200))
    parts = split_parts(text, tokens=800, part_tokens=100)
    assert "".join(parts) == text
    assert len(parts) > 5 and all(part.endswith("\n") for part in parts)


def depth_script(messages):
    if "nested question" in messages[1]["content"]:
        return "FINAL(nested)"  # a nested RLM runs on the root model, as in the reference RLM
    turn = turn_of(messages)
    if turn == 0:
        return "```repl\nx = llm_query('sub: ' + context[:5])\nprint(x)\n```"
    if turn == 1:
        return "```repl\ny = rlm_query('nested question', context='abc')\nprint(y)\n```"
    return "FINAL(done)"


def sub_script(messages):
    return "FINAL(nested)" if messages[0]["role"] == "system" else "sub answer"


@pytest.mark.parametrize(
    ("arm", "sub_calls", "depth_reached", "sub_model_calls"),
    [("rlm-depth0", 0, 0, 0), ("rlm", 2, 0, 2), ("rlm-depth2", 2, 1, 1)],
)
async def test_rlm_arms_set_the_depth(instance, arm, sub_calls, depth_reached, sub_model_calls):
    root, sub = ScriptedModel(depth_script, model_name="r"), ScriptedModel(sub_script, model_name="s")
    outcome = await run_arm(arm, ModelSetup(root=root, sub=sub, environment="local"), instance)
    assert outcome.status == "ok" and outcome.answer == "done"
    assert outcome.extra["sub_calls"] == sub_calls
    assert outcome.extra["depth_reached"] == depth_reached
    assert len(sub.calls) == sub_model_calls
    assert outcome.calls == len(root.calls) + sub_model_calls


async def test_rlm_arm_reports_a_non_final_finish(instance):
    root = ScriptedModel(["```repl\nprint(1)\n```"])
    setup = ModelSetup(root=root, environment="local", rlm_kwargs={"max_iterations": 2})
    outcome = await run_arm("rlm", setup, instance)
    assert outcome.status == "max_iterations"


def test_setup_from_options_builds_root_and_sub_once():
    # The shape model_options returns, with the scripted backend so that no SDK is imported.
    options = {
        "backend": "scripted",
        "backend_kwargs": {"replies": ["a"], "model_name": "root-model"},
        "other_backends": ["scripted"],
        "other_backend_kwargs": [{"replies": ["b"], "model_name": "sub-model"}],
    }
    setup = ModelSetup.from_options(options, environment="local")
    assert setup.root.model_name == "root-model" and setup.sub is not None
    assert setup.sub.model_name == "sub-model" and setup.owned == [setup.root, setup.sub]
    assert ModelSetup.from_options({"backend": "scripted", "backend_kwargs": {"replies": ["a"]}}).sub is None
    nano = {"backend": "scripted", "backend_kwargs": {"replies": ["n"], "model_name": "nano"}}
    with_compactor = ModelSetup.from_options(options, compaction_options=nano)
    assert with_compactor.compactor is not None and with_compactor.compactor.model_name == "nano"
    assert with_compactor.settings()["compaction_model"] == "nano" and len(with_compactor.owned) == 3


def test_parse_arms():
    assert parse_arms("direct, rlm,direct") == ["direct", "rlm"]
    with pytest.raises(ValueError, match="unknown arm 'rlm3'"):
        parse_arms("rlm3")
    with pytest.raises(ValueError, match="no arm"):
        parse_arms(" , ")


async def test_scripted_usage_is_summed_over_compaction_calls(instance):
    reply = LMResponse(text="notes", input_tokens=10, output_tokens=5, model="m")
    root, sub = ScriptedModel([LMResponse("Answer: x", 7, 3, "m")]), ScriptedModel([reply])
    outcome = await run_arm("compaction", ModelSetup(root=root, compactor=sub, compaction_tokens=600), instance)
    parts = outcome.extra["parts"]
    assert outcome.input_tokens == 10 * parts + 7 and outcome.output_tokens == 5 * parts + 3
