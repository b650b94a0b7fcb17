"""Each option of a run is declared once (`core.settings.option`); `RLM`'s keywords, attributes, docs,
``rlm ask``'s flags and `ChatRLM`'s fields are derived from the declarations, and these tests hold them so."""

from __future__ import annotations

import dataclasses
import inspect
import typing

import pytest

from rlm_adapters import RLM, Limits, ScriptedModel
from rlm_adapters.core import settings
from rlm_adapters.core.settings import ALIASES, OPTIONS, RLMOptions, RLMSettings


def test_the_keyword_types_are_the_declared_types() -> None:
    """`RLMOptions` (what an IDE shows for ``RLM(...)``) restates each option's type: held equal here."""
    keywords = RLMOptions.__annotations__
    assert set(keywords) == set(OPTIONS) | set(ALIASES)
    for alias, name in ALIASES.items():
        assert keywords[alias] == keywords[name], alias
    for name, declared in OPTIONS.items():
        written = keywords[name]
        written = written if isinstance(written, str) else written.__forward_arg__
        # A dict option also takes None (an empty one), as `RLM`'s keyword always did.
        assert written in (declared.type, f"{declared.type} | None"), name


def test_every_field_of_the_settings_is_a_declared_option() -> None:
    fields = {f.name for f in dataclasses.fields(RLMSettings)} - {"limits"}
    assert fields | {f.name for f in dataclasses.fields(Limits)} == {d.field for d in OPTIONS.values()}
    assert all(OPTIONS[name].option.doc for name in OPTIONS)


def test_the_signature_and_the_docstring_name_every_option() -> None:
    parameters = inspect.signature(RLM).parameters
    doc = inspect.getdoc(RLM) or ""
    for name, declared in OPTIONS.items():
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default == declared.default, name
        assert f"\n        {name}: " in doc, name  # under **options
    assert "{options}" not in doc


def test_an_unknown_keyword_is_refused_in_one_line_naming_it() -> None:
    with pytest.raises(
        TypeError, match=r"^RLM\(\) got an unexpected keyword argument 'max_dept'; did you mean 'max_depth'\?$"
    ):
        RLM(backend=ScriptedModel(["x"]), max_dept=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'zzz'$"):
        RLM(backend=ScriptedModel(["x"]), zzz=1)  # type: ignore[call-arg]


def test_every_option_is_an_attribute_that_replaces_the_settings() -> None:
    rlm = RLM(backend=ScriptedModel(["x"]))
    for name in {f.name for f in dataclasses.fields(RLMSettings)}:
        assert getattr(rlm, name) == getattr(rlm.settings, name)
    rlm.max_output_chars = 500
    assert rlm.settings.max_output_chars == 500


def test_the_typed_dict_is_what_type_checkers_see() -> None:
    hints = typing.get_type_hints(settings.RLMOptions)
    assert hints["max_depth"] is int and hints["persistent"] is bool


def test_the_runs_wall_clock_has_one_name_and_its_older_one_is_an_alias() -> None:
    """``run_timeout`` everywhere; ``timeout`` (public before) still sets the same limit, never both at once."""
    model = ScriptedModel(["x"])
    assert RLM(backend=model, run_timeout=5).limits.timeout == 5
    assert RLM(backend=model, timeout=6).limits.timeout == 6
    assert RLM(backend=model, max_timeout=7).limits.timeout == 7  # the reference's name
    with pytest.raises(ValueError, match=r"^give run_timeout=5 or timeout=6, not both"):
        RLM(backend=model, run_timeout=5, timeout=6)
    with pytest.raises(ValueError, match=r"give run_timeout=5 or max_timeout=7, not both"):
        RLM(backend=model, run_timeout=5, max_timeout=7)
    with pytest.raises(ValueError, match=r"^run_timeout=-1 must be > 0 seconds"):
        RLM(backend=model, run_timeout=-1)
    assert ALIASES == {"timeout": "run_timeout"}
