"""Every field of a trajectory log is untrusted (issue 24, defect 14).

A log with a field of the wrong type is refused in one line naming the file, the line and the field (exit
status 2 from the CLI, never a traceback); anything else renders, in the terminal, as an HTML page whose
data a strict JSON parser reads, and as export lines.
"""

from __future__ import annotations

import copy
import io
import json
import math
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from rlm_adapters.viewer.export import ExportOptions, examples
from rlm_adapters.viewer.html import render_html
from rlm_adapters.viewer.log_build import MAX_NESTED_RUNS, load
from rlm_adapters.viewer.log_reader import BadLogError
from rlm_adapters.viewer.terminal import render

RLM_BIN = shutil.which("rlm")
TOP, NESTED = "a" * 32, "b" * 32


def good_records() -> list[dict[str, Any]]:
    """A small log of every record kind: a run whose cell makes a sub-call and a nested run."""
    top = {"type": "event", "run_id": TOP, "depth": 0, "parent_run_id": None}
    nested = {"type": "event", "run_id": NESTED, "depth": 1, "parent_run_id": TOP}
    usage = {
        "total": {"calls": 3, "input_tokens": 30, "output_tokens": 6, "cost": 0.01},
        "root": {"calls": 1, "input_tokens": 10, "output_tokens": 2, "cost": 0.005},
        "sub": {"calls": 2, "input_tokens": 20, "output_tokens": 4, "cost": 0.005},
        "by_model": {"m": {"calls": 3, "input_tokens": 30, "output_tokens": 6, "cost": 0.01}},
    }
    return [
        {
            "type": "header",
            "version": 1,
            "run_id": TOP,
            "time": 100.0,
            "query": "how many?",
            "context": {"type": "str", "total_chars": 50, "preview": "the preview of the context"},
            "config": {"root_model": "m", "sub_models": ["s"], "limits": {"timeout": None}},
        },
        {
            **top,
            "kind": "run_start",
            "time": 100.0,
            "query": "how many?",
            "context_description": {"type": "str", "total_chars": 50},
            "root_model": "m",
            "sub_models": ["s"],
        },
        {
            **top,
            "kind": "root_call",
            "time": 101.0,
            "iteration": 1,
            "messages_sent": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}],
            "reply": "```repl\nx = llm_query('p')\n```",
            "model": "m",
            "input_tokens": 10,
            "output_tokens": 2,
            "cost": 0.005,
            "duration": 1.0,
        },
        {
            **top,
            "kind": "sub_call_start",
            "time": 101.5,
            "call_id": "c1",
            "batch_id": None,
            "batch_size": 1,
            "call_kind": "llm_query",
            "model": "s",
            "prompt": "p",
        },
        {
            **top,
            "kind": "sub_call_end",
            "time": 101.7,
            "call_id": "c1",
            "batch_id": None,
            "call_kind": "llm_query",
            "model": "s",
            "response": "r",
            "error": None,
            "input_tokens": 5,
            "output_tokens": 1,
            "cost": 0.001,
            "duration": 0.2,
        },
        {**nested, "kind": "run_start", "time": 101.8, "query": "inner", "context_description": {}, "root_model": "m"},
        {**nested, "kind": "final", "time": 101.9, "response": "inner ok", "finish_reason": "final", "usage": {}},
        {
            **top,
            "kind": "cell",
            "time": 102.0,
            "iteration": 1,
            "index": 1,
            "code": "x = llm_query('p')",
            "output": "printed",
            "error": None,
            "duration": 0.9,
            "timed_out": False,
            "final": False,
        },
        {**top, "kind": "budget", "time": 102.1, "message": "half the budget is spent"},
        {
            **top,
            "kind": "final",
            "time": 103.0,
            "response": "42",
            "finish_reason": "final",
            "iterations": 1,
            "usage": usage,
            "error": None,
        },
    ]


def write(path: Path, records: list[dict[str, Any]]) -> Path:
    # allow_nan: Python's json writes NaN / Infinity, as any hostile writer may.
    path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in records), encoding="utf-8")
    return path


def strict_json(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def show_everything(path: Path) -> None:
    """Everything the viewer makes of a log: the terminal tree, the page, the export lines."""
    trajectory = load(path)
    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    console.print(render(trajectory, full=True))
    console.print(render(trajectory))
    page = render_html(trajectory)
    page.encode("utf-8")
    found = re.search(r'<script type="application/json" id="rlm-data">(.*?)</script>', page, re.S)
    assert found is not None
    strict_json(found[1])  # the browser's JSON.parse accepts it: the page cannot stay on "Loading"
    options = ExportOptions(finish_reasons=None, include_context=True, sub_calls=True, nested=True, metadata=True)
    for line in examples(trajectory, options):
        json.dumps(line, allow_nan=False).encode("utf-8")


def refusal(path: Path) -> str:
    with pytest.raises(BadLogError) as caught:
        show_everything(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(repr(str(path))), message
    return message


def test_the_good_log_shows_everywhere(tmp_path: Path) -> None:
    path = write(tmp_path / "good.jsonl", good_records())
    show_everything(path)
    root = load(path).root
    assert root.response == "42" and root.children()[0].response == "inner ok"
    assert root.usage["by_model"]["m"]["calls"] == 3


# (record index, field, bad value, what the message says)
WRONG_TYPES = [
    (0, "query", 7, "'query' is 7, expected text"),
    (0, "query", ["a"], "'query' is a list of 1 items, expected text"),
    (0, "context", [1, 2], "'context' is a list of 2 items, expected an object"),
    (0, "context", "big", "'context' is \"big\", expected an object"),
    (0, "time", math.inf, "'time' is Infinity, expected a finite number"),
    (0, "config", {"root_model": 5}, "'config.root_model' is 5, expected text"),
    (0, "config", {"sub_models": "s"}, "'config.sub_models' is \"s\", expected a list of texts"),
    (0, "version", -1, "'version' is -1"),
    (1, "context_description", [1], "'context_description' is a list of 1 items, expected an object"),
    (1, "query", {"q": 1}, "'query' is an object of 1 keys, expected text"),
    (1, "depth", 1.5, "'depth' is 1.5, expected a whole number"),
    (1, "run_id", 12, "'run_id' is 12, expected text"),
    (1, "parent_run_id", 3, "'parent_run_id' is 3, expected text"),
    (1, "sub_models", [1], "'sub_models' is a list of 1 items, expected a list of texts"),
    (2, "iteration", math.inf, "'iteration' is Infinity, expected a whole number"),
    (2, "iteration", -2, "'iteration' is -2, expected a whole number"),
    (2, "iteration", 2**60, "expected a whole number from 0 to 2**53"),
    (2, "iteration", True, "'iteration' is true, expected a whole number"),
    (2, "time", math.nan, "'time' is NaN, expected a finite number"),
    (2, "cost", -math.inf, "'cost' is -Infinity, expected a finite number"),
    (2, "duration", "1", "'duration' is \"1\", expected a finite number"),
    (2, "messages_sent", "hi", "expected a list of"),
    (2, "messages_sent", [{"role": "user", "content": 5}], "'messages_sent[0].content' is 5, expected text"),
    (2, "messages_sent", [["user", "q"]], "expected a list of"),
    (2, "reply", None, None),  # null is the default, not a mismatch
    (2, "reply", 3.5, "'reply' is 3.5, expected text"),
    (3, "prompt", {"x": 1}, "'prompt' is an object of 1 keys, expected text"),
    (3, "batch_size", "4", "'batch_size' is \"4\""),
    (3, "call_kind", 1, "'call_kind' is 1, expected text"),
    (4, "response", [1], "'response' is a list of 1 items, expected text"),
    (4, "error", 404, "'error' is 404, expected text"),
    (4, "input_tokens", math.nan, "'input_tokens' is NaN"),
    (7, "timed_out", "yes", "'timed_out' is \"yes\", expected true or false"),
    (7, "final", 1, "'final' is 1, expected true or false"),
    (7, "code", 0, "'code' is 0, expected text"),
    (7, "index", math.inf, "'index' is Infinity"),
    (8, "message", {}, "'message' is an object of 0 keys, expected text"),
    (9, "usage", [1], "'usage' is a list of 1 items, expected an object"),
    (9, "usage", {"total": {"cost": math.nan}}, "'usage.total.cost' is NaN, expected a finite number"),
    (9, "usage", {"root": {"calls": -1}}, "'usage.root.calls' is -1"),
    (9, "usage", {"by_model": {"m": 3}}, "'usage.by_model' is 3, expected an object"),
    (9, "finish_reason", 0, "'finish_reason' is 0, expected text"),
    (9, "type", 5, "'type' is 5, expected text"),
    (9, "kind", ["final"], "'kind' is a list of 1 items, expected text"),
]


@pytest.mark.parametrize(("index", "key", "value", "said"), WRONG_TYPES)
def test_a_field_of_the_wrong_type_is_refused_naming_it(
    tmp_path: Path, index: int, key: str, value: Any, said: str | None
) -> None:
    records = good_records()
    records[index][key] = value
    path = write(tmp_path / "bad.jsonl", records)
    if said is None:
        show_everything(path)
        return
    message = refusal(path)
    assert f"line {index + 1}" in message and said in message, message


def test_lone_surrogates_and_non_finite_free_form_values_still_render(tmp_path: Path) -> None:
    records = good_records()
    records[0]["config"]["limits"] = {"max_cost": math.inf, "weird": math.nan, "\udc80key": "\ud800"}
    records[2]["reply"] = "lone \udc80 surrogate"
    records[7]["output"] = "printed \ud83d half an emoji"
    path = write(tmp_path / "odd.jsonl", records)
    show_everything(path)
    trajectory = load(path)
    assert trajectory.root.iterations[0].turn is not None
    assert trajectory.root.iterations[0].turn.reply == "lone \\udc80 surrogate"
    assert trajectory.header["config"]["limits"] == {"max_cost": None, "weird": None, "\\udc80key": "\\ud800"}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"[1, 2]\n", "is not a JSON object"),
        (b"42\n", "is not a JSON object"),
        (b"not json\n", "is not valid JSON"),
        (b"\xff\xfe{}\n", "is not UTF-8 text"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nests too deeply"),
        (b'{"type": "event", "kind": "cell", "iteration": ' + b"9" * 5000 + b"}\n", "is not valid JSON"),
        (b'{"type": "header", "run_id": "x"}\n', "is a second header"),
    ],
)
def test_a_line_that_is_not_a_record_is_refused(tmp_path: Path, line: bytes, said: str) -> None:
    records = good_records()
    head = "".join(json.dumps(r) + "\n" for r in records[:3]).encode()
    tail = "".join(json.dumps(r) + "\n" for r in records[3:]).encode()
    path = tmp_path / "lines.jsonl"
    path.write_bytes(head + line + tail)
    message = refusal(path)
    assert "line 4" in message and said in message, message


def test_a_torn_last_line_is_a_live_log_not_an_error(tmp_path: Path) -> None:
    records = good_records()
    text = "".join(json.dumps(r) + "\n" for r in records[:-1])
    path = tmp_path / "live.jsonl"
    path.write_bytes(text.encode() + json.dumps(records[-1]).encode()[:30] + "é".encode()[:1])
    show_everything(path)
    assert not load(path).finished


def test_free_form_json_nested_too_deep_is_refused(tmp_path: Path) -> None:
    deep: Any = "bottom"
    for _ in range(200):
        deep = [deep]
    records = good_records()
    records[0]["config"]["limits"] = deep
    assert "'config' is a list of 1 items, expected at most 64 levels of nesting" in refusal(
        write(tmp_path / "deep.jsonl", records)
    )


def test_runs_nested_past_the_limit_are_refused_and_at_it_render(tmp_path: Path) -> None:
    def chain(levels: int) -> list[dict[str, Any]]:
        records = good_records()[:2]
        for depth in range(1, levels + 1):
            records.append(
                {
                    "type": "event",
                    "kind": "run_start",
                    "run_id": f"run{depth}",
                    "parent_run_id": TOP if depth == 1 else f"run{depth - 1}",
                    "depth": depth,
                    "time": 100.0 + depth,
                }
            )
        return records

    show_everything(write(tmp_path / "limit.jsonl", chain(MAX_NESTED_RUNS)))
    message = refusal(write(tmp_path / "past.jsonl", chain(MAX_NESTED_RUNS + 1)))
    assert f"is nested {MAX_NESTED_RUNS + 1} runs deep" in message


@pytest.mark.slow
def test_many_iterations_load_in_linear_time(tmp_path: Path) -> None:
    """Each iteration number is looked up in a table, not by scanning every earlier iteration."""
    records = good_records()[:2]
    turn = good_records()[2]
    records += [{**turn, "iteration": n, "time": 101.0 + n} for n in range(60_000)]
    path = write(tmp_path / "long.jsonl", records)
    started = time.perf_counter()
    trajectory = load(path)
    assert len(trajectory.root.iterations) == 60_000
    assert time.perf_counter() - started < 30  # a scan per lookup takes minutes here


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
FIELDS = sorted({key for record in good_records() for key in record} | {"context", "usage", "batch_id"})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(
        st.tuples(st.integers(min_value=0, max_value=9), st.sampled_from(FIELDS), JSON_VALUES), min_size=1, max_size=4
    )
)
@pytest.mark.slow
def test_any_field_holding_any_json_value_renders_or_is_refused_in_one_line(
    tmp_path: Path, changes: list[tuple[int, str, Any]]
) -> None:
    records = copy.deepcopy(good_records())
    for index, key, value in changes:
        records[index][key] = value
    path = write(tmp_path / "fuzz.jsonl", records)
    try:
        show_everything(path)
    except BadLogError as error:
        message = str(error)
        assert "\n" not in message and message.startswith(repr(str(path))), message


# -- the commands, as users run them -------------------------------------------------------------------------

needs_rlm = pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is missing (pip install -e .)")


def rlm(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert RLM_BIN is not None
    return subprocess.run([RLM_BIN, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


@needs_rlm
@pytest.mark.parametrize(
    ("index", "key", "value"),
    [
        (2, "iteration", math.inf),
        (0, "query", 12345),
        (1, "context_description", ["not", "a", "dict"]),
        (9, "usage", {"total": {"cost": math.nan}}),
    ],
)
def test_view_html_and_export_refuse_in_one_line(tmp_path: Path, index: int, key: str, value: Any) -> None:
    records = good_records()
    records[index][key] = value
    write(tmp_path / "bad.jsonl", records)
    for args in (["view", "bad.jsonl"], ["view", "bad.jsonl", "--html", "out.html"], ["export", "bad.jsonl"]):
        done = rlm(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stdout == "" and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"rlm {args[0]}: 'bad.jsonl' line {index + 1}"), done.stderr
        assert f"'{key}" in done.stderr and "expected" in done.stderr
    assert not (tmp_path / "out.html").exists()


@needs_rlm
def test_export_to_a_file_leaves_nothing_when_a_later_log_is_refused(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    write(tmp_path / "logs" / "rlm_1_good.jsonl", good_records())
    bad = good_records()
    bad[2]["iteration"] = math.nan
    write(tmp_path / "logs" / "rlm_2_bad.jsonl", bad)
    done = rlm("export", "logs/rlm_1_good.jsonl", "logs/rlm_2_bad.jsonl", "-o", "out/train.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "rlm_2_bad.jsonl' line 3: 'iteration' is NaN" in done.stderr
    assert list((tmp_path / "out").iterdir()) == []


@needs_rlm
def test_a_lone_surrogate_renders_in_view_html_and_export(tmp_path: Path) -> None:
    records = good_records()
    records[7]["output"] = "half \udc80 a character \x1b]0;t\x07"
    write(tmp_path / "odd.jsonl", records)
    view = rlm("view", "odd.jsonl", "--full", "--no-color", cwd=tmp_path)
    assert view.returncode == 0 and "half \\udc80 a character \\x1b]0;t\\x07" in view.stdout
    page = rlm("view", "odd.jsonl", "--html", "odd.html", cwd=tmp_path)
    assert page.returncode == 0 and "half \\\\udc80 a character" in (tmp_path / "odd.html").read_text("utf-8")
    export = rlm("export", "odd.jsonl", "--include-context", "--finish-reason", "any", cwd=tmp_path)
    assert export.returncode == 0 and "\x1b" not in export.stdout


@needs_rlm
def test_a_hostile_file_among_the_logs_does_not_stop_a_lookup_by_id(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    write(tmp_path / "logs" / f"rlm_20250101_000000_{TOP[:8]}.jsonl", good_records())
    (tmp_path / "logs" / f"rlm_20250102_000000_{TOP[:8]}.jsonl").write_bytes(b"\xff[not json\n")
    done = rlm("view", TOP[:12], "--log-dir", "logs", "--no-color", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "answer: 42" in done.stdout


def reference_records() -> list[dict[str, Any]]:
    """A log of the reference RLM's shape (`viewer/reference.py`): metadata, then iteration records."""
    call = {
        "root_model": "nano",
        "prompt": "find it",
        "response": "found",
        "usage_summary": {"model_usage_summaries": {"nano": {"total_input_tokens": 3, "total_output_tokens": 1}}},
        "execution_time": 0.2,
    }
    block = {"code": "x = llm_query(p)", "result": {"stdout": "out", "stderr": "", "rlm_calls": [call]}}
    return [
        {"type": "metadata", "root_model": "mini", "other_backends": ["openai"], "timestamp": "2025-01-01T00:00:00"},
        {
            "type": "iteration",
            "iteration": 1,
            "timestamp": "2025-01-01T00:00:01",
            "prompt": [{"role": "user", "content": "q"}],
            "response": "```repl\nx = llm_query(p)\n```",
            "code_blocks": [block],
            "iteration_time": 1.0,
        },
        {"type": "iteration", "iteration": 2, "prompt": [], "response": "done", "final_answer": "found"},
    ]


PLACES = [
    (0, ()),
    (1, ()),
    (2, ()),
    (1, ("code_blocks", 0)),
    (1, ("code_blocks", 0, "result")),
    (1, ("code_blocks", 0, "result", "rlm_calls", 0)),
    (1, ("code_blocks", 0, "result", "rlm_calls", 0, "usage_summary")),
    (1, ("prompt", 0)),
]
REFERENCE_KEYS = sorted(
    {"type", "root_model", "other_backends", "timestamp", "iteration", "prompt", "response", "code_blocks"}
    | {"iteration_time", "final_answer", "code", "result", "stdout", "stderr", "rlm_calls", "usage_summary"}
    | {"execution_time", "model_usage_summaries", "role", "content", "error"}
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    changes=st.lists(
        st.tuples(st.sampled_from(PLACES), st.sampled_from(REFERENCE_KEYS), JSON_VALUES), min_size=1, max_size=4
    )
)
def test_a_reference_log_with_any_field_of_any_value_renders_or_is_refused(
    tmp_path: Path, changes: list[tuple[tuple[int, tuple[Any, ...]], str, Any]]
) -> None:
    records = reference_records()
    for (index, route), key, value in changes:
        target: Any = records[index]
        for step in route:
            target = target[step] if isinstance(target, dict | list) and _has(target, step) else None
        if isinstance(target, dict) and not (index == 0 and key == "type"):
            target[key] = value
    path = write(tmp_path / "rlm_2025-01-01_00-00-00_abcd1234.jsonl", records)
    try:
        show_everything(path)
    except BadLogError as error:
        assert "\n" not in str(error) and str(error).startswith(repr(str(path)))


def _has(container: dict[str, Any] | list[Any], step: Any) -> bool:
    if isinstance(container, dict):
        return step in container
    return isinstance(step, int) and step < len(container)


def test_the_reference_log_shape_used_above_is_read_as_one(tmp_path: Path) -> None:
    trajectory = load(write(tmp_path / "rlm_x_abcd1234.jsonl", reference_records()))
    assert trajectory.root.response == "found" and trajectory.header["format"].startswith("reference RLM")
    assert trajectory.root.batches()[0].calls[0].response == "found"
