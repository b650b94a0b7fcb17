"""A persistent run handed a `Continuation` gets only the new part while its REPL holds the rest."""

from __future__ import annotations

import asyncio

from rlm_adapters import RLM, Continuation, Message, ScriptedModel


def root_reads_its_question(messages: list[Message]) -> str:
    question = messages[1]["content"].split("The question to answer:\n", 1)[1].split("\n")[0]
    return f"```repl\nquery_seen = {question!r}\nFINAL(repr(context) + ' | ' + query_seen)\n```"


def test_new_part_while_the_repl_holds_the_rest_else_the_whole() -> None:
    with RLM(backend=ScriptedModel(root_reads_its_question), environment="local", persistent=True) as rlm:
        first = rlm.completion(Continuation("AB", "B", known=0, new_query="new"), "whole")
        assert first.response == "'AB' | whole"  # nothing known yet: the whole input
        known = first.metadata["session"]["contexts"]
        second = rlm.completion(Continuation("ABC", "C", known=known, new_query="new"), "whole")
        assert second.response == "'C' | new"
        # A caller whose count is stale (a run it did not see) gets the whole input again.
        third = rlm.completion(Continuation("ABCD", "D", known=known, new_query="new"), "whole")
        assert third.response == "'ABCD' | whole"
        # A session whose sandbox was closed (idle, lifetime) starts over with the whole input.
        session = rlm.session
        assert session is not None
        session.runner.submit(session.reset("idle_timeout")).result()
        fourth = rlm.completion(Continuation("ABCDE", "E", known=third.metadata["session"]["contexts"]), "whole")
        assert fourth.response == "'ABCDE' | whole" and fourth.metadata["session"]["restarted"] == "idle_timeout"


def test_without_a_session_it_is_the_whole_input() -> None:
    rlm = RLM(backend=ScriptedModel(root_reads_its_question), environment="local")
    result = asyncio.run(rlm.acompletion(Continuation("full", "new", known=3, new_query="q2"), "q1"))
    assert result.response == "'full' | q1"
