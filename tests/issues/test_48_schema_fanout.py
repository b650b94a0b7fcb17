"""Issue 48, item 2: schemas whose ``$ref``s fan out never finished.

A 31-node, 2,174-character schema meant 2**30 checks of one value: in `rlm serve` ``tools`` on the run's own
loop (neither the run timeout nor a client hanging up stopped it), in ``response_format`` / `rlm-mcp`
``output_schema`` on a thread nobody could stop. A schema is now refused when it is accepted if its ``$ref``s
expand past `MAX_EXPANDED_NODES`, loop at one place of the value, chain past `MAX_HOPS` or nest past
`MAX_SCHEMA_DEPTH` (`core.schema_cost`), and every check stops after `MAX_CHECK_STEPS`. Each hostile schema
below is one an attacker would try next against the counter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from mcp import Client

from rlm_adapters import RLM, Message, ScriptedModel
from rlm_adapters.core import json_schema, schema_cost
from rlm_adapters.core.engine import tool_calls
from rlm_adapters.core.engine.tool_calls import offer_tools
from rlm_adapters.core.output import OutputSchema
from rlm_adapters.errors import ConfigurationError, ToolSchemaError
from rlm_adapters.mcp_server import ServerConfig, build_server
from rlm_adapters.testing import FakeOpenAIServer
from tests.loop_lag import MAX_STALL, LagProbe
from tests.serve.conftest import Served, served_config
from tests.serve.conftest import serve as serve  # `rlm serve` in a thread, stopped at the test's end (a fixture)
from tests.serve.conftest import upstream as upstream  # the fake OpenAI server it calls (a fixture)

pytest.importorskip("jsonschema", reason="tool calling needs jsonschema (the tools extra)")

ASK = [{"role": "user", "content": "What is the magic number?"}]


def fan_out(levels: int, keyword: str = "allOf", copies: int = 2) -> dict[str, Any]:
    """The issue's schema: each of `levels` definitions names the next one twice (2**levels checks)."""
    return {"type": "object", "properties": {"x": {"$ref": "#/$defs/d0"}}, "$defs": fan_defs(levels, keyword, copies)}


def fan_defs(levels: int, keyword: str = "allOf", copies: int = 2) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {keyword: [{"$ref": f"#/$defs/d{i + 1}"}] * copies} for i in range(levels)}
    defs[f"d{levels}"] = {"type": "integer"}
    return defs


def nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "integer"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def chain(links: int) -> dict[str, Any]:
    defs = {f"c{i}": {"$ref": f"#/$defs/c{i + 1}"} for i in range(links)}
    defs[f"c{links}"] = {"type": "string"}
    return {"$ref": "#/$defs/c0", "$defs": defs}


def test_the_issues_schema_is_31_nodes_and_2174_characters() -> None:
    schema = fan_out(30)
    assert len(json.dumps(schema)) == 2174
    assert sum(1 for _ in json_schema._nodes(schema, "#")) == 93  # 31 definitions, 62 $ref nodes


# Each: (schema, what the refusal says). All pass the answer checker's keyword list, so only the bound stops them.
HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("allOf fan-out", fan_out(30), "expands to more than 100,000 subschemas"),
    ("anyOf fan-out", fan_out(30, "anyOf"), "expands to more than 100,000 subschemas"),
    ("oneOf fan-out", fan_out(20, "oneOf"), "expands to more than 100,000 subschemas"),
    ("$ref to # at the root", {"$ref": "#"}, "applies itself to the same value"),
    ("$ref to # in allOf", {"type": "object", "allOf": [{"$ref": "#"}]}, "applies itself to the same value"),
    (
        "a loop through $defs",
        {"$defs": {"a": {"anyOf": [{"$ref": "#/$defs/b"}]}, "b": {"not": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"},
        "applies itself to the same value",
    ),
    (
        "recursion that branches at each level",
        {"type": "object", "properties": {"a": {"allOf": [{"$ref": "#"}, {"$ref": "#"}]}}},
        "recursive $refs that branch",
    ),
    ("a $defs chain past 64 hops", chain(70), "chain of more than 64"),
    ("nesting 400 deep", nested(400), "nested 400 levels deep; at most 64"),
    (
        "one definition of 21 nodes named 6,000 times",
        {"properties": {f"p{i}": {"$ref": "#/$defs/x"} for i in range(6_000)}, "$defs": {"x": {"anyOf": [{}] * 20}}},
        "expands to more than 100,000",
    ),
]


@pytest.mark.parametrize(("name", "schema", "words"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_output_schema_is_refused_when_accepted(name: str, schema: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match="output_schema") as caught:
        OutputSchema.of(schema)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("name", "schema", "words"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_tool_schema_is_refused_naming_the_tool(name: str, schema: dict[str, Any], words: str) -> None:
    tools = [
        {"name": "ok", "parameters": {"type": "object"}},
        {"name": "fine", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
        {"name": "bad", "parameters": schema},
    ]
    with pytest.raises(ToolSchemaError, match="tools: the parameters of 'bad'") as caught:
        offer_tools(tools)
    assert words in str(caught.value) and (caught.value.index, caught.value.part) == (2, "parameters")


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"$dynamicRef": "#meta"}, "'$dynamicRef' at '#' is not supported"),
        ({"$defs": {"a": {"$dynamicAnchor": "meta"}}}, "'$dynamicAnchor' at '#/$defs/a' is not supported"),
        ({"properties": {"a": {"$anchor": "x"}}}, "'$anchor' at '#/properties/a'"),
        ({"$ref": "#x", "$defs": {"x": {}}}, "names an anchor"),
        # A nested $id moves the base of the $refs below it: counted here as one thing, checked as another.
        ({"properties": {"a": {"$id": "https://example.com/a", "$ref": "#/$defs/x"}}}, "'$id' at '#/properties/a'"),
        ({"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"a": {"id": "x"}}}, "'id' at"),
        ({"$ref": "https://example.com/schema.json"}, "is not a reference inside this schema"),
        ({"allOf": [{"properties": {"a": {}}}], "unevaluatedProperties": False}, "beside allOf"),
    ],
)
def test_tool_schemas_that_would_move_what_a_ref_names_are_refused(schema: dict[str, Any], words: str) -> None:
    with pytest.raises(ToolSchemaError) as caught:
        offer_tools([{"name": "t", "parameters": schema}])
    assert words in str(caught.value)


HIDDEN = {"$ref": "#/$defs/d0"}  # the 2**30 fan-out, behind a pointer read one way or the other


@pytest.mark.parametrize(
    ("ref", "defs"),
    [
        # RFC 6901: an empty segment is the key "" (the old reader skipped it, so it counted $defs.x).
        ("#/$defs//x", {"x": {"type": "string"}, "": {"x": HIDDEN}}),
        # A URI fragment's %-escapes are read before the pointer: "a%25" is the key "a%".
        ("#/$defs/a%25", {"a%25": {"type": "string"}, "a%": HIDDEN}),
    ],
)
def test_the_counter_reads_a_ref_as_jsonschema_does(ref: str, defs: dict[str, Any]) -> None:
    """A pointer the counter read differently from jsonschema would let it count a small schema and the
    check walk a 2**30 one."""
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}, "$defs": {**defs, **fan_defs(30)}}
    with pytest.raises(ToolSchemaError, match="expands to more than"):
        offer_tools([{"name": "t", "parameters": schema}])


def test_recursive_schemas_that_do_not_branch_are_accepted() -> None:
    """A tree or a linked list refers to itself inside properties or items, once per level: linear."""
    tree = {
        "$defs": {
            "node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}
        },
        "$ref": "#/$defs/node",
    }
    schema = OutputSchema.of(tree)
    value: dict[str, Any] = {"kids": []}
    for _ in range(30):
        value = {"kids": [value, {"kids": []}]}
    assert json_schema.problems(value, schema.json_schema) == []
    parameters = {"type": "object", "properties": {"root": {"$ref": "#/$defs/node"}}, "$defs": tree["$defs"]}
    offer = offer_tools([{"name": "t", "parameters": parameters}])
    assert offer is not None and offer.problems("t", {"root": value}) == []
    assert offer.problems("t", {"root": {"kids": [{"kids": 1}]}})  # and still checked at every level


def test_a_huge_enum_counts_as_its_options() -> None:
    many = {"type": "object", "properties": {"a": {"enum": list(range(60_000))}, "b": {"$ref": "#/properties/a"}}}
    with pytest.raises(ToolSchemaError, match="expands to more than"):
        offer_tools([{"name": "t", "parameters": many}])


def test_each_check_stops_after_its_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within the bounds, a big value under a wide schema is still a lot of work: both checkers count the
    subschemas they apply and stop at `MAX_CHECK_STEPS` (lowered here) with a problem that says so."""
    monkeypatch.setattr(json_schema, "MAX_CHECK_STEPS", 5_000)
    monkeypatch.setattr(tool_calls, "MAX_CHECK_STEPS", 5_000)
    wide = {"type": "object", "properties": {"a": {"type": "array", "items": {"allOf": [{"type": "integer"}] * 50}}}}
    value = {"a": list(range(1_000))}  # 50,000 subschemas applied
    found = json_schema.problems(value, json_schema.check_schema(wide))
    assert found == [
        "value: too large to check against this schema (more than 5,000 subschemas applied); make the value smaller"
    ]
    offer = offer_tools([{"name": "t", "parameters": wide}])
    assert offer is not None
    assert offer.problems("t", value) == [
        "the arguments: too large to check against this schema (more than 5,000 subschemas applied); make the value "
        "smaller"
    ]
    assert offer.problems("t", {"a": list(range(10))}) == []  # a small value passes under the same limit


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
        {"type": "object", "patternProperties": {f"^k{i}$": {"type": "string"} for i in range(200)}},
    ],
)
def test_work_that_grows_inside_one_keyword_takes_steps_too(monkeypatch: pytest.MonkeyPatch, schema: Any) -> None:
    """``uniqueItems`` over objects was every pair compared (10**10 for 100,000), ``patternProperties`` is
    every pattern for every key: each counts its work, so the step limit holds them too."""
    monkeypatch.setattr(tool_calls, "MAX_CHECK_STEPS", 20_000)
    offer = offer_tools([{"name": "t", "parameters": schema}])
    assert offer is not None
    value = {"a": [{"k": i} for i in range(30_000)]} if "properties" in schema else {f"x{i}": 1 for i in range(200)}
    assert "too large to check" in offer.problems("t", value)[0]


def test_a_repeated_item_is_found_in_one_pass_with_json_equality() -> None:
    assert json_schema.repeated_item([{"a": 1}, {"a": 2}, {"a": 1.0}]) == {"a": 1.0}
    assert json_schema.repeated_item([1, True, "1", [1], {"1": 1}]) is None
    offer = offer_tools([{"name": "t", "parameters": {"type": "object", "properties": {"a": {"uniqueItems": True}}}}])
    assert offer is not None and "non-unique" in offer.problems("t", {"a": [[1], [1.0]]})[0]


def test_an_error_about_a_huge_argument_quotes_a_few_characters() -> None:
    """jsonschema writes ``repr(instance)`` into every error: 1,000 options each failing on a 1 MB text
    were a gigabyte of text; each is a line now."""
    offer = offer_tools(
        [{"name": "t", "parameters": {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}] * 1000}}}}]
    )
    assert offer is not None
    (problem,) = offer.problems("t", {"a": "x" * 900_000})
    assert len(problem) < 400 and problem.startswith("args['a']: 'xxx")


@pytest.mark.usefixtures("frozen_heap")
async def test_a_tool_check_runs_off_the_runs_loop_and_the_run_deadline_ends_it() -> None:
    """Arguments that take the whole step budget to check (seconds of jsonschema): the run's loop keeps
    running meanwhile, and the run's wall clock ends the run instead of waiting for the check."""
    wide = {"type": "object", "properties": {"a": {"type": "array", "items": {"allOf": [{"type": "integer"}] * 50}}}}
    code = "call_tool('t', a=list(range(19_000)))"  # 950,000 subschemas applied: near the limit, never over

    def reply(messages: list[Message]) -> str:
        return f"```repl\n{code}\n```"

    rlm = RLM(ScriptedModel(reply), environment="local", run_timeout=0.5, max_iterations=3)
    async with LagProbe() as probe:
        result = await rlm.acompletion("ctx", "q", tools=[{"name": "t", "parameters": wide}])
    assert result.finish_reason == "timeout"
    assert probe.worst < MAX_STALL, probe.worst


# -- each front end says it in its own words -------------------------------------------------------


def test_serve_refuses_with_a_400_naming_the_field(upstream: FakeOpenAIServer, serve: Any) -> None:
    served: Served = serve(served_config(upstream))
    client = openai.OpenAI(base_url=served.base_url, api_key="k", max_retries=0)
    tools: list[Any] = [
        {"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object"}}} for i in range(2)
    ]
    tools.append({"type": "function", "function": {"name": "bad", "parameters": fan_out(30)}})
    with pytest.raises(openai.BadRequestError, match="expands to more than") as caught:
        client.chat.completions.create(model="test", messages=ASK, tools=tools)  # type: ignore[arg-type]
    assert caught.value.param == "tools[2].function.parameters"
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": fan_out(30)}}
    with pytest.raises(openai.BadRequestError, match="expands to more than") as caught:
        client.chat.completions.create(model="test", messages=ASK, response_format=schema)  # type: ignore[arg-type]
    assert caught.value.param == "response_format.json_schema.schema"
    assert upstream.counters.requests == 0


async def test_rlm_mcp_refuses_with_a_tool_error(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    config = ServerConfig(
        roots=[tmp_path], model="root-model", base_url=fake_server.base_url, api_key="k", sandbox="local",
        log_dir=tmp_path / "logs", environ={},
    )  # fmt: skip
    async with Client(build_server(config)) as client:
        result = await client.call_tool("rlm_query", {"query": "q", "text": "t", "output_schema": fan_out(30)})
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    assert "output_schema: the schema expands to more than 100,000 subschemas" in text and "\n" not in text
    assert fake_server.counters.requests == 0


def test_the_cli_refuses_with_one_line(fake_server: FakeOpenAIServer, tmp_path: Path) -> None:
    from tests.cli.test_cli import RLM_BIN, run_rlm, server_env

    if RLM_BIN is None:
        pytest.skip("the rlm console script is not installed (pip install -e .)")
    (tmp_path / "a.txt").write_text("text\n", encoding="utf-8")
    (tmp_path / "answer.json").write_text(json.dumps(fan_out(30)), encoding="utf-8")
    done = run_rlm(["ask", "-c", "a.txt", "--schema", "answer.json", "q"], server_env(fake_server), tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "--schema 'answer.json': the schema expands to more than 100,000 subschemas" in done.stderr
    assert fake_server.counters.requests == 0


def test_the_bounds_are_cheap_to_check() -> None:
    """Refusing the 2**30 schema costs about as much as accepting a plain one of the same size: the counter
    stops growing its numbers past the limit (a count of passes, not a timing)."""
    assert schema_cost.check_cost(fan_out(12)) < schema_cost.MAX_EXPANDED_NODES
    with pytest.raises(ValueError, match="expands"):
        schema_cost.check_cost(fan_out(30, "anyOf", 100))  # 100**30 would not fit in memory, let alone be walked


@pytest.mark.parametrize(
    "data",
    [{"enum": [[0] * 50]}, {"const": {"a": [0] * 50}}, {"required": [f"k{i}" for i in range(50)]}],
    ids=["enum", "const", "required"],
)
def test_the_values_a_check_compares_count_toward_the_bound(data: dict[str, Any]) -> None:
    """A ``const`` of fifty values applied 2,000 times at one place is 100,000 comparisons for each node of the
    value, however few subschemas it takes to write."""
    schema = {
        "type": "object",
        "properties": {"a": {"allOf": [{"$ref": "#/$defs/big"}] * 2_000}},
        "$defs": {"big": data},
    }
    with pytest.raises(ToolSchemaError, match="expands to more than"):
        offer_tools([{"name": "t", "parameters": schema}])
    with pytest.raises(ConfigurationError, match="expands to more than"):
        OutputSchema.of(schema)
