"""``RLM_TRACING=otlp``: ``rlm-mcp`` exports its runs' spans over OTLP/HTTP to a collector (one in the test, on
127.0.0.1); a wrong value stops the server in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.http", reason='needs the OTLP exporter (pip install "rlm-adapters[otlp]")'
)
pytest.importorskip("mcp", reason='rlm-mcp needs mcp (pip install "rlm-adapters[mcp]")')

from mcp import Client, StdioServerParameters
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from rlm_adapters.testing import FakeOpenAIServer
from tests.mcp_server.conftest import server_env


class Collector:
    """An OTLP/HTTP trace collector: keeps every span it is sent, with its resource's attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                request = ExportTraceServiceRequest.FromString(body)
                with collector.lock:
                    for resource in request.resource_spans:
                        service = {a.key: a.value.string_value for a in resource.resource.attributes}
                        for scope in resource.scope_spans:
                            for span in scope.spans:
                                attributes = {a.key: a.value for a in span.attributes}
                                collector.spans.append(
                                    {
                                        "name": span.name,
                                        "service": service,
                                        "scope": scope.scope.name,
                                        "id": span.span_id.hex(),
                                        "parent": span.parent_span_id.hex(),
                                        "attributes": attributes,
                                    }
                                )
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as running:
        yield running


@pytest.mark.slow
async def test_rlm_mcp_exports_its_runs_spans_over_otlp(
    workspace: Path, fake_server: FakeOpenAIServer, tmp_path: Path, collector: Collector
) -> None:
    fake_server.root = ['```repl\nFINAL(llm_query(context[0]["text"]))\n```']
    env = {
        **server_env(fake_server, tmp_path / "logs"),
        "RLM_TRACING": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
    }
    env.pop("OTEL_SERVICE_NAME", None)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rlm_adapters.mcp_server", "--root", str(workspace), "--sandbox", "local"],
        env=env,
        cwd=str(workspace),
    )
    async with Client(params) as client:
        result = await client.call_tool("rlm_query", {"query": "magic?", "paths": ["docs/a.md"]})
    assert not result.is_error
    # The server flushes its spans when it exits (the client closed stdin).
    names = sorted(span["name"] for span in collector.spans if span["scope"] == "rlm_adapters")
    assert names == ["chat leaf-model", "chat root-model", "execute_tool repl", "invoke_agent rlm", "rlm.iteration"]
    run = next(span for span in collector.spans if span["name"] == "invoke_agent rlm")
    # The MCP SDK traces the tool call too: the run is its child, in one trace.
    call = next(span for span in collector.spans if span["name"] == "tools/call rlm_query")
    assert run["parent"] == call["id"]
    assert run["service"]["service.name"] == "rlm-mcp" and run["scope"] == "rlm_adapters"
    assert run["attributes"]["gen_ai.provider.name"].string_value == "openai"
    assert run["attributes"]["gen_ai.conversation.id"].string_value == result.structured_content["trajectory_id"]  # type: ignore[index]


@pytest.mark.slow
def test_a_wrong_switch_stops_rlm_mcp_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLM_")}
    done = subprocess.run(
        [sys.executable, "-m", "rlm_adapters.mcp_server", "--root", str(tmp_path)],
        env={**env, "RLM_TRACING": "yes please"},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "rlm-mcp: RLM_TRACING='yes please' must be otlp, console or off"
