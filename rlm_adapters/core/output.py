"""Typed answers: ``RLM.completion(..., output_schema=...)``.

An `OutputSchema` is made once per call from a Pydantic model, a dataclass, a TypedDict or a JSON schema
dict. The root model is told the schema and asked to finish with ``FINAL_VAR`` of a Python value; the final
value (a dict or list crosses the sandbox boundary as JSON, see `FinalAnswer.value`; a text is read as
JSON) is validated: by Pydantic for a type, by `core.json_schema` for a dict. A value that fails goes back
to the root model with the problems, up to ``output_retries`` times; then the run ends with
``finish_reason="error"``, the last value in ``result.final_value``. A valid one becomes ``result.value``:
an instance of the model or dataclass, or the JSON value for a schema dict.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from typing_extensions import is_typeddict

import rlm_adapters.core.json_schema as json_schema
from rlm_adapters.core.sandbox import FinalAnswer
from rlm_adapters.errors import ConfigurationError

if TYPE_CHECKING:
    import pydantic

SchemaInput = type | Mapping[str, Any]
# How many lines of a validation error the root model is shown.
MAX_PROBLEM_LINES = 8


def _pydantic() -> Any:
    """Pydantic, imported when a typed answer first needs it (not with the engine: it costs tens of ms)."""
    return importlib.import_module("pydantic")


def _is_model(spec: Any) -> bool:
    # Until something has imported Pydantic, no class can be one of its models: no need to import it to ask.
    loaded = sys.modules.get("pydantic")
    return loaded is not None and isinstance(spec, type) and issubclass(spec, loaded.BaseModel)


@dataclass(frozen=True)
class OutputSchema:
    """The schema a run's answer must match, and its check.

    Attributes:
        json_schema: The JSON schema the root model is shown.
        name: The schema's name (the model's or dataclass's, or the schema's ``title``).
        adapter: Pydantic's validator for a type; None for a JSON schema dict.
    """

    json_schema: dict[str, Any]
    name: str
    adapter: pydantic.TypeAdapter[Any] | None = None

    @classmethod
    def of(cls, spec: OutputSchema | SchemaInput, where: str = "output_schema") -> OutputSchema:
        """The schema of `spec`: a Pydantic model, a dataclass, a TypedDict or a JSON schema dict.

        Raises:
            ConfigurationError: `spec` is none of those, or a JSON schema this engine cannot enforce in full.
        """
        if isinstance(spec, OutputSchema):
            return spec
        if isinstance(spec, Mapping):
            schema = json_schema.check_schema(spec, where)
            return cls(schema, str(schema.get("title") or "answer"))
        if _is_model(spec) or (isinstance(spec, type) and (dataclasses.is_dataclass(spec) or is_typeddict(spec))):
            pd = _pydantic()
            try:
                adapter: pydantic.TypeAdapter[Any] = pd.TypeAdapter(spec)
                schema = adapter.json_schema()
            except pd.PydanticUserError as exc:
                raise ConfigurationError(f"{where}={spec.__name__}: {str(exc).splitlines()[0]}") from None
            return cls(schema, spec.__name__, adapter)
        raise ConfigurationError(
            f"{where}={spec!r:.80} must be a Pydantic model, a dataclass, a TypedDict or a JSON schema dict"
        )

    def instructions(self) -> str:
        """What the root model is told (added to its system prompt)."""
        return (
            "The final answer must be a JSON value matching this JSON schema:\n```json\n"
            f"{json.dumps(self.json_schema, indent=1)}\n```\nBuild it in the REPL as a Python value (for example "
            '`answer = {...}` with exactly the schema\'s keys), then finish with `FINAL_VAR("answer")`. Do not '
            "finish with prose."
        )

    def parse(self, final: FinalAnswer) -> tuple[Any, str | None]:
        """The typed value of a final answer, or None and what is wrong with it (for the root model)."""
        candidates = _candidates(final)
        first: str | None = None
        for value in candidates:
            typed, problem = self._validate(value)
            if problem is None:
                return typed, None
            first = first or problem
        return None, first or "the answer is not a JSON value: build it as a Python dict or list and use FINAL_VAR"

    def _validate(self, value: Any) -> tuple[Any, str | None]:
        if self.adapter is None:
            found = json_schema.problems(value, self.json_schema)
            return (value, None) if not found else (None, "; ".join(found[:MAX_PROBLEM_LINES]))
        try:
            return self.adapter.validate_python(value), None
        except _pydantic().ValidationError as exc:
            return None, _describe(exc)
        except RecursionError:
            return None, "the value is nested too deeply to check"

    def validator(self, also: Callable[[FinalAnswer], str | None] | None = None) -> AnswerCheck:
        """A `final_validator` for the loop: this schema's check, then `also`'s (the caller's own)."""
        return AnswerCheck(self, also)


class AnswerCheck:
    """A run's `final_validator` for a schema; it keeps the typed value of the answer it accepted.

    The loop calls it on a worker thread (see `RunLevel._validate`), so the run's result takes the value
    from here rather than checking the answer again on the event loop.
    """

    def __init__(self, schema: OutputSchema, also: Callable[[FinalAnswer], str | None] | None) -> None:
        self.schema = schema
        self.also = also
        self._accepted: tuple[FinalAnswer, Any] | None = None

    def __call__(self, final: FinalAnswer) -> str | None:
        typed, problem = self.schema.parse(final)
        if problem is None and self.also is not None:
            problem = self.also(final)
        if problem is None:
            self._accepted = (final, typed)
        return problem

    def value_of(self, final: FinalAnswer) -> Any:
        """The typed value of `final` when it is the answer this check accepted, else None."""
        if self._accepted is not None and self._accepted[0] is final:
            return self._accepted[1]
        return None


def _candidates(final: FinalAnswer) -> list[Any]:
    """What the answer may be: the value FINAL_VAR gave, or its text read as JSON, or the text itself."""
    value = final.value
    if value is not None and not isinstance(value, str):
        return [value]
    text = final.text if value is None else value
    try:
        return [json.loads(text), text]
    except ValueError:
        return [text]
    except RecursionError:
        return [text]


def _describe(error: pydantic.ValidationError) -> str:
    """A Pydantic error as short lines (where, what), without its documentation links."""
    lines = []
    for item in error.errors(include_url=False)[:MAX_PROBLEM_LINES]:
        where = ".".join(str(part) for part in item["loc"]) or "value"
        lines.append(f"{where}: {item['msg']} (got {item.get('input')!r:.80})")
    more = error.error_count() - len(lines)
    return "; ".join(lines) + (f"; and {more} more" if more > 0 else "")
