"""`RLMSettings`: one frozen, checked object holds every plain option of an `RLM` and every default."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect

import pytest

from rlm_adapters import RLM, ConfigurationError, Limits, RootCall, ScriptedModel
from rlm_adapters.core.events import Event
from rlm_adapters.core.settings import DEFAULTS, RLMSettings

FINAL = "```repl\nFINAL('done')\n```"


def scripted(*replies: str) -> ScriptedModel:
    return ScriptedModel(list(replies) or [FINAL], model_name="root")


def test_the_signature_of_rlm_states_no_default_of_its_own() -> None:
    """Every parameter of `RLM` that is a setting defaults to the setting's default, so one place holds it."""
    fields = {f.name for f in dataclasses.fields(RLMSettings)} - {"limits"}
    limits = {f.name for f in dataclasses.fields(Limits)}
    checked = []
    for name, parameter in inspect.signature(RLM).parameters.items():
        if name in fields:
            expected = getattr(DEFAULTS, name)
        elif name in limits:
            expected = getattr(DEFAULTS.limits, name)
        else:
            continue
        if isinstance(expected, dict):
            assert parameter.default is None, name  # None: a fresh empty dict
        else:
            assert parameter.default == expected, name
        checked.append(name)
    assert {"max_depth", "max_iterations", "max_root_tokens", "max_sandboxes", "max_concurrency"} <= set(checked)
    assert set(checked) == fields | limits


def test_a_default_rlm_has_the_default_settings() -> None:
    rlm = RLM(backend=scripted())
    assert rlm.settings == DEFAULTS
    assert (rlm.max_depth, rlm.max_iterations, rlm.limits) == (1, 30, Limits())
    assert rlm.limits.max_root_tokens == rlm.limits.max_sub_tokens == 1_000_000


def test_the_reference_spellings_land_in_the_same_settings() -> None:
    ours = RLM(backend=scripted(), timeout=12.0, max_cost=0.25, environment="subprocess").settings
    theirs = RLM(backend=scripted(), max_timeout=12.0, max_budget=0.25, environment="ipython").settings
    assert ours == theirs


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"max_depth": -1}, "max_depth=-1 must be an integer >= 0"),
        ({"max_iterations": True}, "max_iterations=True must be an integer >= 1"),
        ({"max_sandboxes": 0}, "max_sandboxes=0 must be an integer >= 1"),
        ({"max_output_chars": 99}, "max_output_chars=99 must be an integer >= 100"),
        ({"environment": "vm"}, "unknown environment 'vm'"),
        ({"code_fences": "all"}, "code_fences='all' must be 'any' or 'repl'"),
        ({"compaction_threshold_pct": 0}, r"compaction_threshold_pct=0 must be in \(0, 1\]"),
        ({"session_idle_timeout": -5}, "session_idle_timeout=-5 must be a positive number"),
        ({"limits": Limits(max_sub_tokens=10)}, "max_sub_tokens=10 is below the minimum of 50"),
        ({"prices": {"m": "cheap"}}, r"prices\['m'\]='cheap' must be \(usd_per_mtok_in, usd_per_mtok_out\)"),
        ({"prices": {"m": (-1.0, 2.0)}}, "two or four numbers >= 0"),
        ({"prices": {"m": (1.0, float("nan"))}}, "two or four numbers >= 0"),
        ({"prices": {"m": (1.0,)}}, "two or four numbers >= 0"),
        ({"prices": [("m", 1.0)]}, "prices=.* must be a dict"),
        ({"environment_kwargs": ["cell_timeout"]}, "environment_kwargs=.* must be a dict of option names"),
        ({"environment_kwargs": {1: 2}}, "must be a dict of option names"),
    ],
)
def test_a_copy_is_checked_like_the_first(change: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(DEFAULTS, **change)


def test_a_bad_price_fails_at_construction_not_when_a_call_is_priced() -> None:
    with pytest.raises(ConfigurationError, match=r"prices\['root'\]"):
        RLM(backend=scripted(), environment="local", prices={"root": "cheap"})
    cheap = RLM(backend=scripted(), environment="local", prices={"root": [1, 2]})
    assert cheap.prices == {"root": (1.0, 2.0)} and cheap.completion("c").cost > 0


def test_settings_are_frozen_and_keep_no_reference_to_the_callers_dicts() -> None:
    options = {"cell_timeout": 5}
    rlm = RLM(backend=scripted(), environment="local", environment_kwargs=options, prices={"root": (1.0, 2.0)})
    options["cell_timeout"] = 999
    assert rlm.environment_kwargs == {"cell_timeout": 5}
    with pytest.raises(dataclasses.FrozenInstanceError):
        rlm.settings.max_depth = 3  # type: ignore[misc]


def test_setting_an_attribute_replaces_the_settings_with_a_checked_copy() -> None:
    rlm = RLM(backend=scripted())
    first = rlm.settings
    rlm.max_sandboxes = 4
    assert rlm.settings.max_sandboxes == 4 and first.max_sandboxes == DEFAULTS.max_sandboxes
    with pytest.raises(ConfigurationError, match="max_sandboxes=0"):
        rlm.max_sandboxes = 0
    assert rlm.max_sandboxes == 4  # the refused value left the settings as they were


def test_a_run_keeps_the_settings_it_started_with() -> None:
    """A change made while a run works applies to the next run, never half-way through this one."""
    turns = ["```repl\nprint(1)\n```", "```repl\nprint(2)\n```", FINAL]
    rlm = RLM(backend=scripted(*turns, *turns), environment="local", max_iterations=3)

    def shrink(event: Event) -> None:
        if isinstance(event, RootCall) and event.iteration == 1:
            rlm.max_iterations = 1

    first = rlm.completion("c", callbacks=[shrink])
    assert (first.finish_reason, first.iterations) == ("final", 3)
    second = rlm.completion("c")
    assert (second.finish_reason, second.iterations) == ("max_iterations", 1)


def test_an_unknown_run_argument_is_refused() -> None:
    rlm = RLM(backend=scripted(), environment="local")
    with pytest.raises(TypeError, match="max_depth"):
        rlm.completion("c", max_depth=2)
    with pytest.raises(TypeError, match="bogus"):
        asyncio.run(rlm.acompletion("c", bogus=1))  # type: ignore[call-arg]
