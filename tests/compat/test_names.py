"""Port of the reference's import, type and logger tests (tests/test_imports.py, tests/test_types.py,
tests/test_depth_metadata.py::TestDepth1LoggerMetadata) and its constructor names."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from rlm_adapters import RLM, ConfigurationError, RLMLogger
from rlm_adapters.testing import FakeOpenAIServer

from .helpers import by_turn, final, make


def test_the_references_top_level_names_import_from_ours() -> None:
    ours = importlib.import_module("rlm_adapters")
    for name in (
        "RLM",
        "BudgetExceededError",
        "TimeoutExceededError",
        "TokenLimitExceededError",
        "ErrorThresholdExceededError",
        "CancellationError",
    ):
        assert name in ours.__all__ and getattr(ours, name) is not None
    logger_module = importlib.import_module("rlm_adapters.logger")
    assert logger_module.RLMLogger is RLMLogger and logger_module.__all__ == ["RLMLogger"]


def test_result_has_root_model_prompt_and_reference_usage() -> None:
    leaf_call = "```repl\nx = llm_query('hi')\n```"
    result = make(by_turn(leaf_call, final("42"))).completion("the context", root_prompt="q")
    assert (result.response, result.root_model, result.prompt) == ("42", "test-model", "the context")
    usage = result.usage_summary.to_dict()
    assert {"total", "root", "sub", "by_model"} <= set(usage)  # ours, unchanged
    summaries = usage["model_usage_summaries"]
    assert set(summaries) == {"test-model", "leaf"}
    assert summaries["test-model"]["total_calls"] == 2 and summaries["leaf"]["total_calls"] == 1
    assert set(summaries["leaf"]) == {"total_calls", "total_input_tokens", "total_output_tokens", "total_cost"}
    summary = result.usage_summary
    assert summary.total_input_tokens + summary.total_output_tokens == summary.total.total_tokens


def test_in_memory_logger_keeps_the_trajectory_and_writes_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    root = by_turn("```repl\nprint(1)\n```", "```repl\nprint(2)\n```", final("3"))
    result = make(root, logger=RLMLogger()).completion("c")
    trajectory = result.metadata["trajectory"]
    assert trajectory["header"]["run_id"] == result.run_id
    root_calls = [e for e in trajectory["events"] if e["kind"] == "root_call"]
    assert len(root_calls) == 3
    assert result.trajectory_file is None and list(tmp_path.iterdir()) == []


def test_no_logger_no_trajectory() -> None:
    assert "trajectory" not in make(by_turn(final("x"))).completion("c").metadata


def test_file_logger_still_writes_files(tmp_path: Path) -> None:
    result = make(by_turn(final("x")), logger=RLMLogger(log_dir=tmp_path)).completion("c")
    assert result.trajectory_file is not None and result.trajectory_file.parent == tmp_path
    assert "trajectory" not in result.metadata


def test_limit_aliases() -> None:
    rlm = RLM(backend=by_turn("x"), max_timeout=12.0, max_budget=0.25)
    assert (rlm.limits.timeout, rlm.limits.max_cost) == (12.0, 0.25)
    with pytest.raises(ConfigurationError, match="give timeout=1 or max_timeout=2, not both"):
        RLM(backend=by_turn("x"), timeout=1, max_timeout=2)


def test_custom_system_prompt_replaces_ours_and_gets_the_tools() -> None:
    template = "You are a test RLM. Tools:{custom_tools_section}\nSubmit with {{answer}}."
    root = by_turn(final("ok"))
    make(
        root, custom_system_prompt=template, custom_tools={"lookup": {"tool": len, "description": "counts"}}
    ).completion("c")
    system = root.calls[0][0]["content"]
    assert system.startswith("You are a test RLM. Tools:\nCustom tools and data in the REPL:\n- `lookup`: counts")
    assert system.endswith("Submit with {answer}.")
    assert "stored in a Python REPL" not in system


def test_sampling_args_reach_the_requests(fake_server: FakeOpenAIServer) -> None:
    fake_server.root = ["```repl\nprint(llm_query('magic number 12345'))\n```", "FINAL(done)"]
    kwargs = {"model_name": "m", "base_url": fake_server.base_url, "api_key": "k", "max_retries": 0}
    rlm = RLM(
        backend="openai",
        backend_kwargs=kwargs,
        environment="local",
        sampling_args={"temperature": 0.2},
        sub_sampling_args={"temperature": 0.9, "seed": 7},
    )
    assert rlm.completion("c").response == "done"
    roots = [r["options"] for r in fake_server.requests_log if r["root"]]
    leaves = [r["options"] for r in fake_server.requests_log if not r["root"]]
    assert roots and all(o.get("temperature") == 0.2 for o in roots)
    assert leaves and all(o.get("temperature") == 0.9 and o.get("seed") == 7 for o in leaves)


def test_sampling_args_need_a_backend_name() -> None:
    with pytest.raises(ConfigurationError, match="sampling_args need a backend name"):
        RLM(backend=by_turn("x"), sampling_args={"temperature": 0})


def test_ipython_environment_maps_to_the_subprocess_sandbox() -> None:
    root = by_turn("```repl\nx = 40 + 2\nx\n```", final("ok"))
    rlm = make(root, environment="ipython")
    result = rlm.completion("c")
    assert rlm.environment == "subprocess" and result.metadata["sandbox"] == "subprocess"
    assert "42" in root.calls[1][-1]["content"]  # a trailing expression is echoed, as in IPython


def test_a_message_list_prompt_is_flattened_as_the_reference_does() -> None:
    root = by_turn("```repl\nprint(repr(context))\n```", final("ok"))
    messages = [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}]
    result = make(root).completion(messages)
    assert "['first', 'second']" in root.calls[1][-1]["content"]
    assert result.prompt == messages
