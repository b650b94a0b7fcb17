"""Every entry point against a real model nobody here scripted (SmolLM2-135M on llama.cpp's server).

Each run is bounded (a few turns, short replies) and asserts only what holds for any model: the run ends
within its limits with a clear finish reason, the usage equals the server's own counters for finished calls
and counts cut ones, and nothing hangs or prints a traceback. The model's answers are never asserted.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlm_adapters import RLM, RLMResult
from tests.real_model.conftest import LocalModel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

FINISHES = {"final", "max_iterations", "budget", "timeout", "error"}
# Short replies and few turns: a 135M model rambles, and the suite runs on two cores.
LEAN = {"max_iterations": 2, "max_reply_tokens": 64, "run_timeout": 300, "max_depth": 1}
CONTEXT = "\n".join(f"line {i}: the value of item_{i} is {i * 7}" for i in range(200)) + "\n__version__ = '3.1.4'\n"
QUESTION = "What is the value of __version__?"


def _rlm(local_model: LocalModel, **options: Any) -> RLM:
    return RLM(backend="openai", backend_kwargs=local_model.backend_kwargs(), **{**LEAN, **options})


def _assert_counted(result: RLMResult, before_after: tuple[Any, Any]) -> None:
    """Usage equals what the server processed and generated (every call of the run finished)."""
    spent = before_after[1] - before_after[0]
    total = result.usage_summary.total
    assert total.cut_calls == 0, result.usage_summary.to_dict()
    assert (total.input_tokens, total.output_tokens) == (spent.prompt, spent.predicted)


def test_completion_ends_within_its_limits_and_counts_what_the_server_counted(local_model: LocalModel) -> None:
    before = local_model.counters()
    result = _rlm(local_model).completion(CONTEXT, QUESTION)
    after = local_model.counters()
    assert result.finish_reason in FINISHES
    assert result.iterations <= LEAN["max_iterations"]
    _assert_counted(result, (before, after))
    # A 64-token cap: the model's replies are cut at it, and the usage says how many were.
    assert result.usage_summary.total.truncated_replies <= result.usage_summary.total.calls


async def test_acompletion_cut_by_its_timeout_counts_the_cut_call(local_model: LocalModel) -> None:
    # Long enough for the prompt and part of the reply on a loaded two-core machine, short of a whole reply.
    rlm = _rlm(local_model, max_reply_tokens=2000, run_timeout=20, max_iterations=1)
    before = local_model.counters()
    result = await rlm.acompletion(CONTEXT[:1500], QUESTION)
    spent = local_model.counters() - before
    total = result.usage_summary.total
    assert result.finish_reason in FINISHES
    if total.cut_calls:  # the cut call's prompt is an estimate; its output is what had streamed in
        assert spent.prompt / 2 <= total.input_tokens <= spent.prompt * 2
        assert spent.predicted / 2 <= total.output_tokens <= spent.predicted
    else:  # the model finished within the time: every call is exact
        assert (total.input_tokens, total.output_tokens) == (spent.prompt, spent.predicted)


def test_rlm_ask_prints_one_line_and_no_traceback(local_model: LocalModel, tmp_path: Path) -> None:
    context = tmp_path / "module.py"
    context.write_text(CONTEXT)
    env = {**os.environ, "OPENAI_BASE_URL": local_model.base_url, "OPENAI_API_KEY": "not-needed"}
    before = local_model.counters()
    flags = ["--max-iterations", "2", "--max-reply-tokens", "64", "--run-timeout", "300", "--json"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlm_adapters",
            "ask",
            "-c",
            str(context),
            "--model",
            local_model.model,
            *flags,
            QUESTION,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
        check=False,
    )
    after = local_model.counters()
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout)
    assert result["finish_reason"] in FINISHES
    assert done.returncode == (0 if result["finish_reason"] == "final" else 1)
    usage = result["usage"]["total"]
    assert (usage["input_tokens"], usage["output_tokens"]) == ((after - before).prompt, (after - before).predicted)


def test_chat_rlm_invoke_and_stream(local_model: LocalModel) -> None:
    pytest.importorskip("langchain_core")
    from rlm_adapters.langchain import ChatRLM

    chat = ChatRLM(backend="openai", backend_kwargs=local_model.backend_kwargs(), **LEAN)
    before = local_model.counters()
    reply = chat.invoke(f"{QUESTION}\n\n{CONTEXT}")
    after = local_model.counters()
    assert reply.response_metadata["finish_reason"] in FINISHES
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["input_tokens"] == (after - before).prompt
    assert reply.usage_metadata["output_tokens"] == (after - before).predicted
    chunks = list(chat.stream(f"{QUESTION}\n\n{CONTEXT}"))
    assert chunks and chunks[-1].response_metadata.get("finish_reason") in FINISHES


def test_llama_index_query_engine(local_model: LocalModel) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core import Document

    from rlm_adapters.llama_index import RLMQueryEngine

    engine = RLMQueryEngine.from_documents(
        [Document(text=CONTEXT, metadata={"file_name": "module.py"})],
        backend="openai",
        backend_kwargs=local_model.backend_kwargs(),
        **LEAN,
    )
    before = local_model.counters()
    response = engine.query(QUESTION)
    after = local_model.counters()
    assert response.metadata is not None and response.metadata["finish_reason"] in FINISHES
    usage = response.metadata["usage"]["total"]
    assert (usage["input_tokens"], usage["output_tokens"]) == ((after - before).prompt, (after - before).predicted)


def test_rlm_mcp_over_the_sdk_client(local_model: LocalModel, tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    from mcp import Client, StdioServerParameters

    (tmp_path / "module.py").write_text(CONTEXT)
    env = {
        **os.environ,
        "OPENAI_BASE_URL": local_model.base_url,
        "OPENAI_API_KEY": "not-needed",
        "RLM_MODEL": local_model.model,
        "RLM_MAX_ITERATIONS": "2",
        "RLM_MAX_REPLY_TOKENS": "64",
        "RLM_RUN_TIMEOUT": "300",
    }
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(tmp_path), "--log-dir", str(tmp_path / "logs")],
        env=env,
        cwd=str(tmp_path),
    )

    async def call() -> Any:
        async with Client(params) as client:
            return await client.call_tool("rlm_query", {"query": QUESTION, "paths": ["module.py"], "detail": "full"})

    before = local_model.counters()
    result = asyncio.run(call())
    after = local_model.counters()
    assert result.structured_content is not None, result.content
    assert result.structured_content["finish_reason"] in FINISHES
    assert "Traceback" not in json.dumps(result.structured_content)
    usage = result.structured_content["detail"]["usage"]["total"]
    assert (usage["input_tokens"], usage["output_tokens"]) == ((after - before).prompt, (after - before).predicted)


def test_rlm_serve_through_the_openai_sdk(local_model: LocalModel) -> None:
    pytest.importorskip("uvicorn")
    import openai

    from rlm_adapters.serve import ServeConfig, parse_model
    from tests.serve.conftest import Served

    spec = f"smol={local_model.model},base_url={local_model.base_url},max_iterations=2,max_reply_tokens=64"
    served = Served(ServeConfig([parse_model(spec)], environment="subprocess"))
    try:
        client = openai.OpenAI(base_url=served.base_url, api_key="local", timeout=400, max_retries=0)
        before = local_model.counters()
        reply = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": CONTEXT + QUESTION}])
        after = local_model.counters()
    finally:
        served.close()
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == (after - before).prompt
    assert reply.usage.completion_tokens == (after - before).predicted
