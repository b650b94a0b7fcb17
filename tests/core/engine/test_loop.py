"""The loop's logic, driven turn by turn by scripted root models."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import (
    RLM,
    BudgetExceededError,
    ConfigurationError,
    Event,
    LMResponse,
    Message,
    ModelError,
    RunFinished,
    ScriptedModel,
    SubCallFinished,
)
from rlm_adapters.core.lm.scripted import Reply
from rlm_adapters.errors import RLMRunFailed
from rlm_adapters.testing import by_turn, turn_of


def echo_leaf(messages: list[Message]) -> Reply:
    return f"leaf saw {len(messages[-1]['content'])} chars"


def make(root: ScriptedModel, **kwargs: Any) -> RLM:
    kwargs.setdefault("environment", "local")
    kwargs.setdefault("other_backends", [ScriptedModel(echo_leaf, model_name="leaf")])
    return RLM(backend=root, **kwargs)


def test_final_from_code() -> None:
    result = make(by_turn("```repl\nn = len(context)\nFINAL(f'{n} chars')\n```")).completion("abcdef", "how long?")
    assert (result.response, result.finish_reason, result.iterations) == ("6 chars", "final", 1)


def test_root_model_never_sees_the_context() -> None:
    root = by_turn("```repl\nprint(context[:5])\n```", "FINAL(ok)")
    make(root).completion("SECRET-CONTEXT-" + "x" * 5000, "q")
    first_turn = root.calls[0]
    assert all("x" * 1000 not in m["content"] for m in first_turn)
    assert "5,015 characters" in first_turn[1]["content"]


def test_final_in_text_after_code_runs_the_code_first() -> None:
    root = by_turn("```repl\nanswer = 'computed ' + str(len(context))\n```\nFINAL_VAR(answer)")
    result = make(root).completion("abc", "q")
    assert result.response == "computed 3"


def test_final_var_answer_can_be_longer_than_any_reply() -> None:
    root = by_turn("```repl\nbig = 'z' * 200_000\n```", "FINAL_VAR(big)")
    result = make(root).completion("abc", "q")
    assert len(result.response) == 200_000
    assert all(len(reply) < 100 for reply in ["```repl\nbig = 'z' * 200_000\n```", "FINAL_VAR(big)"])


def test_final_var_of_undefined_variable_is_reported_and_the_run_goes_on() -> None:
    root = by_turn("FINAL_VAR(nothing_here)", "```repl\nnothing_here = 'now defined'\n```\nFINAL_VAR(nothing_here)")
    result = make(root).completion("abc", "q")
    assert result.response == "now defined" and result.iterations == 2
    assert "no variable named 'nothing_here'" in root.calls[1][-1]["content"]


def test_syntax_error_goes_back_to_the_model() -> None:
    root = by_turn("```repl\nprint((1,\n```", "FINAL(recovered)")
    result = make(root).completion("abc", "q")
    assert result.response == "recovered"
    assert "SyntaxError" in root.calls[1][-1]["content"]


def test_model_that_never_writes_code_is_nudged_then_stopped() -> None:
    root = by_turn("I am thinking.", "Still thinking.", "My best guess is 7.")
    result = make(root, max_iterations=2).completion("abc", "q")
    assert result.finish_reason == "max_iterations"
    assert result.response == "My best guess is 7."
    assert "No code ran" in root.calls[1][-1]["content"]
    assert "used all your turns" in root.calls[2][-1]["content"]


def test_max_iterations_answer_is_cleaned_of_fences() -> None:
    root = by_turn("```repl\nx = 1\n```", "```repl\nx = 2\n```", "```\nthe answer is 2\n```")
    result = make(root, max_iterations=2).completion("abc", "q")
    assert (result.finish_reason, result.response) == ("max_iterations", "the answer is 2")


def test_output_is_truncated_for_the_model_and_says_so() -> None:
    root = by_turn("```repl\nprint('a' * 50_000)\n```", "FINAL(done)")
    make(root, max_output_chars=1000).completion("abc", "q")
    feedback = root.calls[1][-1]["content"]
    assert "output truncated" in feedback and "50,001" in feedback and len(feedback) < 3000


def test_llm_query_batched_is_concurrent_and_ordered() -> None:
    leaf = ScriptedModel(lambda m: m[-1]["content"].upper(), model_name="leaf", latency=0.2)
    root = by_turn("```repl\nr = llm_query_batched([f'p{i}' for i in range(20)])\nFINAL(','.join(r))\n```")
    result = RLM(backend=root, other_backends=[leaf], environment="local").completion("abc", "q")
    assert result.response == ",".join(f"P{i}" for i in range(20))
    # 20 calls of 0.2 s each ran at once, not one after another.
    assert result.execution_time < 2.0


def test_one_failed_prompt_gives_an_error_string_in_its_slot() -> None:
    def leaf(messages: list[Message]) -> Reply:
        if "bad" in messages[-1]["content"]:
            raise ModelError("HTTP 500 from provider", model="leaf")
        return "fine"

    root = by_turn("```repl\nr = llm_query_batched(['a', 'bad', 'c'])\nFINAL(repr(r))\n```")
    result = RLM(backend=root, other_backends=[ScriptedModel(leaf, model_name="leaf")], environment="local").completion(
        "x", "q"
    )
    assert result.response == "['fine', 'Error: HTTP 500 from provider', 'fine']"


def test_model_selection_in_llm_query() -> None:
    other = ScriptedModel(["from other"], model_name="other")
    root = by_turn(
        "```repl\nFINAL(llm_query('hi', model='other') + ' / ' + llm_query('hi', model='nope'))\n```",
        "FINAL(done)",
    )
    rlm = RLM(backend=root, other_backends=[ScriptedModel(["leaf"], model_name="leaf"), other], environment="local")
    result = rlm.completion("x", "q")
    # A failed call is an "Error: ..." string, like every failed sub-call, so the code carried on.
    assert result.response.startswith("from other / Error: unknown model 'nope'")


def test_depth_two_runs_a_nested_rlm_with_its_own_repl() -> None:
    def model(messages: list[Message]) -> str:
        turn = turn_of(messages)
        is_child = "Child task" in messages[1]["content"]
        if is_child:
            return "```repl\nFINAL('child saw ' + str(len(context)))\n```"
        if turn == 0:
            return "```repl\nr = rlm_query('Child task: count', context='0123456789')\nFINAL(r)\n```"
        return "FINAL(unreachable)"

    shared = ScriptedModel(model, model_name="m")
    events: list[Event] = []
    result = RLM(backend=shared, max_depth=2, environment="local", callbacks=[events.append]).completion(
        "root ctx", "q"
    )
    assert result.response == "child saw 10"
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert [e.depth for e in finished] == [1, 0]
    assert finished[0].parent_run_id == finished[1].run_id
    assert result.metadata["depth_reached"] == 1


def test_a_nested_context_is_validated_like_the_top_one() -> None:
    root = by_turn("```repl\nprint(rlm_query('Child task', context=b'raw'))\n```", "FINAL(done)")
    events: list[Event] = []
    result = make(root, max_depth=2, callbacks=[events.append]).completion("ctx", "q")
    assert result.response == "done"
    assert "rlm_query: the context is bytes (3 bytes); decode it to str first" in root.calls[1][-1]["content"]
    assert [e.depth for e in events if isinstance(e, RunFinished)] == [0]  # no child was started


def test_at_max_depth_rlm_query_is_a_plain_sub_call_and_the_root_is_told() -> None:
    root = by_turn("```repl\nFINAL(rlm_query('sub question', context='abc'))\n```")
    rlm = make(root, max_depth=1)
    result = rlm.completion("x", "q")
    assert result.response.startswith("leaf saw")
    assert "maximum recursion depth is reached" in root.calls[0][0]["content"]


def test_max_depth_zero_disables_sub_calls() -> None:
    root = by_turn("```repl\nllm_query('x')\n```", "FINAL(no subcalls)")
    result = make(root, max_depth=0).completion("x", "q")
    assert result.response == "no subcalls"
    assert "disabled in this run (max_depth=0)" in root.calls[1][-1]["content"]
    assert result.usage_summary.sub.calls == 0


def test_usage_counts_every_call_of_every_depth_once() -> None:
    def model(messages: list[Message]) -> str:
        if len(messages) == 1:
            return "leaf answer"
        if "Child" in messages[1]["content"]:
            return "```repl\nFINAL(llm_query('leaf from child'))\n```"
        return "```repl\na = llm_query_batched(['p1', 'p2'])\nb = rlm_query('Child task', context='c')\nFINAL(b)\n```"

    shared = ScriptedModel(model, model_name="m")
    result = RLM(backend=shared, max_depth=2, environment="local").completion("ctx", "q")
    usage = result.usage_summary.to_dict()
    # root: 1 call; sub: 2 batched + child root 1 + child's leaf 1 = 4
    assert usage["root"]["calls"] == 1 and usage["sub"]["calls"] == 4
    assert usage["total"]["calls"] == len(shared.calls) == 5
    assert usage["by_model"]["m"]["calls"] == 5


def test_root_token_budget_ends_with_budget_and_partial_answer() -> None:
    root = by_turn("Partial idea: 41.\n```repl\nprint('x' * 9000)\n```", "FINAL(never)")
    result = make(root, max_root_tokens=2000).completion("abc", "q")
    assert result.finish_reason == "budget"
    assert result.response == "Partial idea: 41."
    assert "max_root_tokens=2,000" in (result.error or "")


def test_sub_token_budget_is_checked_before_the_call() -> None:
    leaf = ScriptedModel(["x"], model_name="leaf")
    root = by_turn("```repl\nr = llm_query_batched(['y' * 4000] * 10)\n```", "FINAL(never)")
    result = RLM(backend=root, other_backends=[leaf], max_sub_tokens=3000, environment="local").completion("a", "q")
    assert result.finish_reason == "budget"
    assert len(leaf.calls) < 10  # refused calls were never sent


def test_raise_on_budget_carries_the_partial_answer() -> None:
    root = by_turn("Guess: 3\n```repl\nprint('x' * 9000)\n```", "FINAL(never)")
    with pytest.raises(BudgetExceededError) as info:
        make(root, max_root_tokens=2000, raise_on_budget=True).completion("abc", "q")
    assert info.value.partial_answer == "Guess: 3"


def test_timeout_interrupts_a_running_cell() -> None:
    root = by_turn("```repl\nwhile True:\n    pass\n```", "FINAL(never)")
    result = make(root, timeout=1.0).completion("abc", "q")
    assert result.finish_reason == "timeout"
    assert result.execution_time < 5


def test_model_error_ends_with_error_finish_and_the_message() -> None:
    def broken(messages: list[Message]) -> Reply:
        raise ModelError("OpenAI call to model 'm' failed with HTTP 401: bad key (check the API key)", model="m")

    with pytest.raises(RLMRunFailed, match="HTTP 401") as caught:
        RLM(backend=ScriptedModel(broken), environment="local").completion("abc", "q")
    assert caught.value.result.finish_reason == "error" and "HTTP 401" in (caught.value.result.error or "")
    result = RLM(backend=ScriptedModel(broken), environment="local", raise_on_error=False).completion("abc", "q")
    assert result.finish_reason == "error" and result.failed


async def test_cancel_event_returns_cancelled_and_closes_the_sandbox() -> None:
    started = asyncio.Event()

    async def slow(messages: list[Message]) -> Reply:
        started.set()
        await asyncio.sleep(30)
        return "FINAL(late)"

    cancel = asyncio.Event()
    rlm = RLM(backend=ScriptedModel(slow), environment="subprocess")
    task = asyncio.create_task(rlm.acompletion("abc", "q", cancel_event=cancel))
    await started.wait()
    cancel.set()
    result = await asyncio.wait_for(task, 5)
    assert result.finish_reason == "cancelled"


async def test_completion_works_inside_a_running_event_loop() -> None:
    result = make(by_turn("FINAL(sync inside async)")).completion("abc", "q")
    assert result.response == "sync inside async"


async def test_astream_yields_events_in_order_ending_with_the_final() -> None:
    root = by_turn("```repl\nx = llm_query('a')\n```", "FINAL(streamed)")
    kinds = [event.kind async for event in make(root).astream("abc", "q")]
    assert kinds[0] == "run_start" and kinds[-1] == "final"
    assert kinds.index("sub_call_start") < kinds.index("sub_call_end") < kinds.index("cell")


async def test_sync_and_async_callbacks_are_both_called() -> None:
    seen_sync: list[str] = []
    seen_async: list[str] = []

    async def async_callback(event: Event) -> None:
        seen_async.append(event.kind)

    rlm = make(by_turn("FINAL(x)"), callbacks=[lambda e: seen_sync.append(e.kind)])
    await rlm.acompletion("abc", "q", callbacks=[async_callback])
    assert seen_sync == seen_async == ["run_start", "root_call", "final"]


def test_custom_tools_are_callable_and_listed_with_descriptions() -> None:
    def lookup(key: str) -> str:
        """Look a key up in the host's table."""
        return {"a": "alpha"}[key]

    root = by_turn("```repl\nFINAL(lookup('a') + str(LIMIT))\n```")
    rlm = make(
        root,
        custom_tools={
            "lookup": lookup,
            "LIMIT": 3,
            "other": {"tool": lambda: 1, "description": "returns one"},
        },
    )
    assert rlm.completion("abc", "q").response == "alpha3"
    system = root.calls[0][0]["content"]
    assert "`lookup`: Look a key up in the host's table." in system and "`other`: returns one" in system


def test_tool_failure_is_an_exception_in_the_repl() -> None:
    def explode() -> None:
        raise KeyError("nope")

    root = by_turn("```repl\nexplode()\n```", "FINAL(ok)")
    make(root, custom_tools={"explode": explode}).completion("abc", "q")
    assert "tool 'explode' failed: KeyError" in root.calls[1][-1]["content"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"custom_tools": {"llm_query": print}}, "clash with the REPL's own names"),
        ({"custom_tools": {"not a name": print}}, "are not valid Python names"),
        ({"backend": "nonexistent"}, "unknown backend 'nonexistent'"),
        ({"environment": "chroot"}, "unknown environment 'chroot'"),
        ({"other_backends": ["openai"], "other_backend_kwargs": []}, "one dict per backend"),
    ],
)
def test_bad_configuration_is_refused_clearly(kwargs: dict[str, Any], message: str) -> None:
    kwargs.setdefault("backend", ScriptedModel(["FINAL(x)"]))
    with pytest.raises(ConfigurationError, match=message):
        RLM(**kwargs)


def test_openai_backend_without_key_or_url_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="set OPENAI_API_KEY"):
        RLM(backend="openai", backend_kwargs={"model_name": "gpt-5-mini"})


def test_list_and_dict_contexts_reach_the_repl_intact() -> None:
    docs = [
        {"id": "a", "text": "alpha", "metadata": {"n": 1}},
        {"id": "b", "text": "beta", "metadata": {"n": 2}},
    ]
    root = by_turn("```repl\nFINAL(','.join(d['id'] for d in context if d['metadata']['n'] > 1))\n```")
    assert make(root, environment="subprocess").completion(docs, "q").response == "b"
    root = by_turn("```repl\nFINAL(str(sorted(context)))\n```")
    assert make(root).completion({"k": 1, "j": 2}, "q").response == "['j', 'k']"


def test_a_cell_past_its_cell_timeout_is_interrupted_and_keeps_its_output_and_variables() -> None:
    root = by_turn(
        "```repl\nx = 1\nprint('the answer is 42')\nwhile True:\n    pass\n```", "```repl\nprint(x)\n```", "FINAL(done)"
    )
    rlm = make(root, environment="subprocess", environment_kwargs={"cell_timeout": 1})
    result = rlm.completion("abc", "q")
    assert result.response == "done"
    told = root.calls[1][-1]["content"]
    assert "the answer is 42" in told and "cell_timeout" in told and "your variables survived" in told
    assert "[block 1 output]\n1" in root.calls[2][-1]["content"]


def test_a_cell_that_swallows_the_interrupt_is_killed_and_the_lost_names_are_said() -> None:
    swallow = (
        "```repl\nx = 1\nkeep = 2\nwhile True:\n    try:\n        while True:\n            pass\n"
        "    except BaseException:\n        pass\n```"
    )
    root = by_turn(swallow, "```repl\nprint(x)\n```", "FINAL(done)")
    rlm = make(root, environment="subprocess", environment_kwargs={"cell_timeout": 1})
    result = rlm.completion("abc", "q")
    assert result.response == "done"
    told = root.calls[1][-1]["content"]
    assert "did not stop when interrupted" in told and "your variables are gone" in told
    assert "NameError" in root.calls[2][-1]["content"]


def test_sub_call_events_carry_the_exact_prompt() -> None:
    events: list[Event] = []
    root = by_turn("```repl\nllm_query('exact prompt text')\n```", "FINAL(x)")
    make(root, callbacks=[events.append]).completion("abc", "q")
    finished = [e for e in events if isinstance(e, SubCallFinished)]
    assert len(finished) == 1 and finished[0].response.startswith("leaf saw")


def test_scripted_model_may_return_its_own_usage() -> None:
    model = ScriptedModel(lambda m: LMResponse("FINAL(x)", 123, 7, "counted"))
    result = RLM(backend=model, environment="local").completion("abc", "q")
    assert result.usage_summary.by_model["counted"].to_dict() == {
        "calls": 1,
        "input_tokens": 123,
        "output_tokens": 7,
        "cost": 0.0,
    }


def test_local_sandbox_applies_its_own_cell_timeout() -> None:
    root = by_turn("```repl\nx = 1\nwhile True:\n    pass\n```", "```repl\nFINAL(str(x))\n```")
    result = make(root, environment_kwargs={"cell_timeout": 0.5}).completion("abc", "q")
    assert result.response == "1"  # interrupted, variables kept
    assert "its limit of 0.5 s (cell_timeout" in root.calls[1][-1]["content"]


async def test_anyio_cancel_scope_still_closes_the_sandbox() -> None:
    """The MCP SDK cancels through anyio scopes, which also cancel awaits inside `finally` blocks."""
    import anyio

    from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox
    from rlm_adapters.core.sandbox.subprocess.spares import POOL

    started: list[SubprocessSandbox] = []
    original = SubprocessSandbox.start

    async def spy(self: SubprocessSandbox, setup: Any) -> None:
        started.append(self)
        await original(self, setup)

    entered = asyncio.Event()

    async def slow(messages: list[Message]) -> Reply:
        for _ in range(500):  # the worker starts during this first root call: wait until it runs
            if started and started[0].worker_pid is not None:
                break
            await asyncio.sleep(0.01)
        entered.set()
        await asyncio.sleep(30)
        return "FINAL(late)"

    SubprocessSandbox.start = spy  # type: ignore[method-assign]
    try:
        rlm = RLM(backend=ScriptedModel(slow), environment="subprocess")
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(rlm.acompletion, "ctx", "q")
                await entered.wait()
                scope.cancel()
    finally:
        SubprocessSandbox.start = original  # type: ignore[method-assign]

    # The worker may still be starting in the background when the scope is cancelled; the shielded close
    # either stops that start or kills the worker. Either way none may remain: allow 3 s on the loop.
    # The idle spare worker kept for the next run (see `spares`) belongs to no run: it is not counted.
    def live_workers() -> list[str]:
        POOL.wait_idle()
        spares = {str(pid) for pid in POOL.pids()}
        found = []
        for entry in Path("/proc").iterdir():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            chain = _ancestry(entry)
            if entry.name in spares or spares & set(chain.split()):
                continue
            if entry.name.isdigit() and "sandbox/programs/worker" in cmdline and str(os.getpid()) in chain:
                found.append(entry.name)
        return found

    for _ in range(150):
        if started and not live_workers():
            break
        await asyncio.sleep(0.02)
    assert started and started[0].worker_pid is not None, "the worker never started"
    assert live_workers() == [], "a sandbox worker outlived the cancelled run"


def _ancestry(entry: Path) -> str:
    """The chain of parent pids of a /proc entry, as text."""
    chain = []
    current = entry
    for _ in range(10):
        try:
            status = (current / "status").read_text()
        except OSError:
            break
        ppid = next((line.split()[1] for line in status.splitlines() if line.startswith("PPid:")), "0")
        chain.append(ppid)
        if ppid in ("0", "1"):
            break
        current = Path("/proc") / ppid
    return " ".join(chain)


def test_installed_packages_import_inside_the_subprocess_sandbox() -> None:
    """The worker starts with -S for speed; site-packages must still be importable by model code."""
    pytest.importorskip("numpy", reason="needs numpy in this environment (pip install numpy)")
    root = by_turn("```repl\nimport numpy\nFINAL(str(int(numpy.arange(5).sum())))\n```")
    assert make(root, environment="subprocess").completion("abc", "q").response == "10"
