"""The provider backends by name where users type them: `rlm ask --backend` and the MCP server's RLM_BACKEND."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rlm_adapters.core.lm.registry import backend_names
from rlm_adapters.model_flags import PROVIDER_BACKENDS, credentials_problem, model_options
from rlm_adapters.testing import FakeBedrockServer, FakeGeminiServer

from .extras import installed, needs_boto3, needs_genai, needs_mcp

if installed("mcp"):  # the MCP test below is skipped without it; the rest of this file needs nothing
    from mcp import Client

    from rlm_adapters.mcp_server import ServerConfig, build_server

RLM_BIN = shutil.which("rlm")
ROOT = ["```repl\nanswer = llm_query(context)\n```", "FINAL_VAR(answer)"]


def test_every_provider_name_is_a_backend() -> None:
    assert set(PROVIDER_BACKENDS) <= set(backend_names())
    for name in ("bedrock", "gemini", "azure_openai", "portkey", "vercel", "litellm"):
        assert name in PROVIDER_BACKENDS


@pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
@needs_genai
def test_rlm_ask_with_the_gemini_backend(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("The magic number is 6161.\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLM_", "OPENAI_", "GEMINI_", "GOOGLE_"))}
    env.update(GEMINI_API_KEY="gemini-key", PYTHONPATH=str(Path(__file__).parents[3]))
    with FakeGeminiServer(root=ROOT) as server:
        args = ["ask", "--backend", "gemini", "--model", "gemini-2.5-flash", "--base-url", server.url, "-q"]
        done = subprocess.run(
            [str(RLM_BIN), *args, "--context", "notes.txt", "--environment", "local", "What is the magic number?"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "6161"
    assert server.counters.by_model == {"gemini-2.5-flash": 3}


@pytest.mark.skipif(RLM_BIN is None, reason="the rlm console script is not installed (pip install -e .)")
def test_rlm_ask_refuses_an_unknown_backend_name(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(RLM_BIN), "ask", "--backend", "bedrok", "--model", "m", "--context", ".", "q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "'bedrok'" in done.stderr and "bedrock" in done.stderr


@needs_mcp
@needs_boto3
async def test_mcp_server_with_rlm_backend_bedrock(tmp_path: Path) -> None:
    with FakeBedrockServer(root=ROOT) as server:
        environ = {
            "RLM_BACKEND": "bedrock",
            "RLM_MODEL": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "RLM_SUB_MODEL": "us.anthropic.claude-haiku-4-5-20251001-v1:0",
        }
        config = ServerConfig(
            roots=[tmp_path], base_url=server.url, sandbox="local", log_dir=tmp_path / "logs", environ=environ
        )
        # Credentials and region come from the usual AWS chain: here, the environment.
        aws = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x", "AWS_REGION": "us-east-1"}
        with pytest.MonkeyPatch.context() as patch:
            for name, value in aws.items():
                patch.setenv(name, value)
            async with Client(build_server(config)) as client:
                result = await client.call_tool(
                    "rlm_query", {"query": "q", "text": "The magic number is 9090.", "detail": "full"}
                )
    assert result.structured_content is not None, result.content
    assert result.structured_content["answer"] == "9090"
    assert server.counters.by_model == {environ["RLM_MODEL"]: 2, environ["RLM_SUB_MODEL"]: 1}
    usage = result.structured_content["detail"]["usage"]  # type: ignore[index]
    assert usage["total"]["cost"] > 0


@pytest.mark.parametrize(
    ("backend", "environ", "expected"),
    [
        ("gemini", {}, "GEMINI_API_KEY"),
        ("gemini", {"GEMINI_API_KEY": "k"}, None),
        ("gemini", {"GOOGLE_GENAI_USE_VERTEXAI": "true"}, None),
        ("azure_openai", {"AZURE_OPENAI_API_KEY": "k"}, "AZURE_OPENAI_ENDPOINT, OPENAI_API_VERSION"),
        (
            "azure_openai",
            {"AZURE_OPENAI_ENDPOINT": "https://x", "OPENAI_API_VERSION": "2024-10-21", "AZURE_OPENAI_API_KEY": "k"},
            None,
        ),
        ("portkey", {}, "PORTKEY_API_KEY"),
        ("vercel", {}, "AI_GATEWAY_API_KEY"),
        ("bedrock", {}, None),  # region and credentials come from the AWS chain, which the client checks
        ("litellm", {}, None),
    ],
)
def test_missing_credentials_are_worded_as_variables_to_set(
    backend: str, environ: dict[str, str], expected: str | None
) -> None:
    options = model_options(model="m", backend=backend, environ=environ)
    problem = credentials_problem(options, environ)
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem and "backend_kwargs" not in problem
