"""A run's OpenTelemetry spans through the SDK's in-memory exporter: the tree of a nested run with batches (parents
across the event loop's tasks and the sandbox round trip), the GenAI attributes, content off by default and on
with the conventions' switch, no context text anywhere, and the status of runs that fail, stop or time out."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason='needs opentelemetry-sdk (pip install "rlm-adapters[otlp]")')

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from rlm_adapters import RLM, Message, ScriptedModel
from rlm_adapters.core.tracing import CONTENT_VARIABLE
from rlm_adapters.errors import ConfigurationError, ModelError, RLMRunFailed

SECRET = "ZEBRA-CONTEXT-7731"
CONTEXT = f"The vault code is {SECRET}. " * 40
ROOT_CODE = (
    "```repl\nkids = rlm_query_batched(['first half', 'second half'], contexts=[context[:200], context[200:400]])\n"
    "notes = llm_query_batched(['note one', 'note two'])\nprint(len(kids), len(notes))\n```"
)
CHILD_CODE = "```repl\nFINAL(llm_query('summarise the piece'))\n```"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def root_model(messages: list[Message]) -> str:
    turn = sum(m["role"] == "assistant" for m in messages)
    if "first half" in messages[1]["content"] or "second half" in messages[1]["content"]:
        return CHILD_CODE
    return [ROOT_CODE, "FINAL(two kids, two notes)"][min(turn, 1)]


def leaf_model(messages: list[Message]) -> str:
    return f"leaf answer to {messages[-1]['content'][:20]}"


def traced(provider: TracerProvider, **kwargs: Any) -> RLM:
    options: dict[str, Any] = {"environment": "subprocess", "max_depth": 2, **kwargs}
    return RLM(
        backend=ScriptedModel(root_model, model_name="root-model"),
        other_backends=[ScriptedModel(leaf_model, model_name="leaf-model")],
        tracing=provider,
        **options,
    )


def by_id(spans: list[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {span.context.span_id: span for span in spans}


def parent_of(span: ReadableSpan, spans: dict[int, ReadableSpan]) -> ReadableSpan | None:
    return spans.get(span.parent.span_id) if span.parent is not None else None


def path(span: ReadableSpan, spans: dict[int, ReadableSpan]) -> list[str]:
    names = []
    current: ReadableSpan | None = span
    while current is not None:
        names.append(current.name)
        current = parent_of(current, spans)
    return names[::-1]


def every_text(spans: list[ReadableSpan]) -> str:
    parts = []
    for span in spans:
        parts.append(span.name)
        parts += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        parts += [str(event.attributes) for event in span.events]
        parts.append(span.status.description or "")
    return "\n".join(parts)


def test_the_span_tree_of_a_nested_run_with_batches(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    result = traced(provider).completion(CONTEXT, "What is the vault code?")
    assert result.finish_reason == "final", result.error
    spans = exporter.get_finished_spans()
    index = by_id(spans)
    assert len({span.context.trace_id for span in spans}) == 1  # one trace for the whole tree
    paths = sorted(" > ".join(path(span, index)) for span in spans)
    top = "invoke_agent rlm > rlm.iteration"
    cell = f"{top} > execute_tool repl"
    child = f"{cell} > rlm.batch > invoke_agent rlm > rlm.iteration"
    assert paths == sorted(
        [
            "invoke_agent rlm",
            top,
            top,
            f"{top} > chat root-model",
            f"{top} > chat root-model",
            cell,
            f"{cell} > rlm.batch",
            f"{cell} > rlm.batch",
            *[f"{cell} > rlm.batch > chat leaf-model"] * 2,
            *[f"{cell} > rlm.batch > invoke_agent rlm"] * 2,
            *[child] * 2,
            *[f"{child} > chat root-model"] * 2,
            *[f"{child} > execute_tool repl"] * 2,
            *[f"{child} > execute_tool repl > chat leaf-model"] * 2,
        ]
    )
    batches = [s for s in spans if s.name == "rlm.batch"]
    assert sorted(s.attributes["rlm.batch.size"] for s in batches) == [2, 2]  # type: ignore[index]
    # Each span lies within its parent's time (explicit times from the events).
    for span in spans:
        parent = parent_of(span, index)
        if parent is not None:
            assert parent.start_time <= span.start_time <= span.end_time <= parent.end_time, span.name  # type: ignore[operator]


def test_gen_ai_attributes_and_usage(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    result = traced(provider).completion(CONTEXT, "What is the vault code?")
    spans = exporter.get_finished_spans()
    top = next(s for s in spans if s.name == "invoke_agent rlm" and s.parent is None)
    attributes = dict(top.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent" and attributes["gen_ai.agent.name"] == "rlm"
    assert attributes["gen_ai.conversation.id"] == result.run_id == attributes["rlm.run_id"]
    assert attributes["gen_ai.request.model"] == "root-model" and attributes["gen_ai.provider.name"] == "rlm.scripted"
    assert attributes["rlm.finish_reason"] == "final" and attributes["rlm.context.chars"] == len(CONTEXT)
    total = result.usage_summary.total
    # The run's span adds up every call of its subtree, nested runs included.
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (
        total.input_tokens,
        total.output_tokens,
    )
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == result.usage_summary.total.calls
    for chat in chats:
        chat_attributes = chat.attributes or {}
        assert chat_attributes["gen_ai.operation.name"] == "chat"
        assert chat_attributes["gen_ai.response.model"] in ("root-model", "leaf-model")
        assert chat_attributes["gen_ai.usage.input_tokens"] > 0 and "gen_ai.usage.cost" in chat_attributes  # type: ignore[operator]
    assert sum(int((c.attributes or {})["gen_ai.usage.input_tokens"]) for c in chats) == total.input_tokens  # type: ignore[arg-type]
    cell = next(s for s in spans if s.name == "execute_tool repl" and s.attributes["rlm.cell.index"] == 1)  # type: ignore[index]
    assert cell.attributes["gen_ai.tool.name"] == "repl" and cell.attributes["rlm.cell.duration"] >= 0  # type: ignore[index,operator]


def test_content_is_off_by_default_and_the_context_is_never_traced(
    provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CONTENT_VARIABLE, raising=False)
    traced(provider, environment="local").completion(CONTEXT, "What is the vault code?")
    spans = exporter.get_finished_spans()
    text = every_text(spans)
    for name in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.call"):
        assert name not in text
    assert SECRET not in text and "vault code" not in text and "summarise" not in text


def test_content_with_the_switch_on_but_still_no_context(
    provider: TracerProvider, exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CONTENT_VARIABLE, "true")
    traced(provider, environment="local").completion(CONTEXT, "What is the vault code?")
    spans = exporter.get_finished_spans()
    top = next(s for s in spans if s.name == "invoke_agent rlm" and s.parent is None)
    assert (
        json.loads(str(top.attributes["gen_ai.input.messages"]))[0]["parts"][0]["content"] == "What is the vault code?"
    )  # type: ignore[index]
    index = by_id(spans)
    first = next(s for s in spans if path(s, index) == ["invoke_agent rlm", "rlm.iteration", "chat root-model"])
    sent = json.loads(str(first.attributes["gen_ai.input.messages"]))  # type: ignore[index]
    assert sent[0]["role"] == "user" and "not traced" in sent[0]["parts"][0]["content"]
    assert "stored in a Python REPL" in str(first.attributes["gen_ai.system_instructions"])  # type: ignore[index]
    assert "rlm_query_batched" in str(first.attributes["gen_ai.output.messages"])  # type: ignore[index]
    leaf = next(s for s in spans if s.name == "chat leaf-model" and "note one" in str(s.attributes))
    assert "leaf answer to note one" in str(leaf.attributes["gen_ai.output.messages"])  # type: ignore[index]
    assert SECRET not in every_text(spans)  # neither the context nor its preview is ever an attribute


def test_a_failed_run_a_cell_error_and_a_failed_call_end_with_error_status(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    def failing(_messages: list[Message]) -> str:
        raise ModelError("the provider is down", model="x")

    replies = iter(["```repl\nx = {}['missing key']\n```", "```repl\nprint(llm_query('x'))\n```", "FINAL(ok)"])
    rlm = RLM(
        backend=ScriptedModel(lambda m: next(replies), model_name="root-model"),
        other_backends=[ScriptedModel(failing, model_name="leaf-model")],
        environment="local",
        tracing=provider,
    )
    assert rlm.completion("ctx", "q").finish_reason == "final"
    spans = exporter.get_finished_spans()
    cells = [s for s in spans if s.name == "execute_tool repl"]
    assert cells[0].status.status_code is StatusCode.ERROR and cells[0].attributes["error.type"] == "KeyError"  # type: ignore[index]
    assert "missing key" not in every_text(spans)  # the error's text is content
    leaf = next(s for s in spans if s.name == "chat leaf-model")
    assert leaf.status.status_code is StatusCode.ERROR
    top = next(s for s in spans if s.parent is None)
    assert top.status.status_code is StatusCode.UNSET  # the run itself answered

    exporter.clear()
    broken = RLM(backend=ScriptedModel(failing, model_name="root-model"), environment="local", tracing=provider)
    with pytest.raises(RLMRunFailed):
        broken.completion("ctx", "q")
    top = next(s for s in exporter.get_finished_spans() if s.parent is None)
    assert top.status.status_code is StatusCode.ERROR and top.attributes["error.type"] == "error"  # type: ignore[index]


def test_a_timeout_ends_the_running_cell_and_the_run_as_errors(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    rlm = RLM(
        backend=ScriptedModel(["```repl\nimport time\ntime.sleep(30)\n```"], model_name="root-model"),
        environment="subprocess",
        timeout=1.5,
        tracing=provider,
    )
    assert rlm.completion("ctx", "q").finish_reason == "timeout"
    spans = exporter.get_finished_spans()
    top = next(s for s in spans if s.parent is None)
    assert top.status.status_code is StatusCode.ERROR and top.attributes["error.type"] == "timeout"  # type: ignore[index]
    cell = next(s for s in spans if s.name == "execute_tool repl")
    assert cell.status.status_code is StatusCode.ERROR
    assert all(s.end_time is not None for s in spans)


async def test_a_cancelled_run_ends_every_span_it_opened(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    started = asyncio.Event()

    async def slow_leaf(_messages: list[Message]) -> str:
        started.set()
        await asyncio.sleep(30)
        return "never"

    rlm = RLM(
        backend=ScriptedModel(["```repl\nprint(llm_query_batched(['a', 'b']))\n```"], model_name="root-model"),
        other_backends=[ScriptedModel(slow_leaf, model_name="leaf-model")],
        environment="local",
        tracing=provider,
    )
    cancel = asyncio.Event()
    run = asyncio.create_task(rlm.acompletion("ctx", "q", cancel_event=cancel))
    await started.wait()
    cancel.set()
    assert (await run).finish_reason == "cancelled"
    spans = exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    assert names.count("chat leaf-model") == 2 and "rlm.batch" in names and "execute_tool repl" in names
    top = next(s for s in spans if s.parent is None)
    assert top.status.status_code is StatusCode.ERROR and top.attributes["error.type"] == "cancelled"  # type: ignore[index]
    for leaf in (s for s in spans if s.name == "chat leaf-model"):
        assert leaf.status.status_code is StatusCode.ERROR and leaf.attributes["error.type"] == "cancelled"  # type: ignore[index]


def test_the_callers_span_is_the_parent_of_the_run(provider: TracerProvider, exporter: InMemorySpanExporter) -> None:
    tracer = provider.get_tracer("the-app")
    with tracer.start_as_current_span("request") as outer:
        RLM(backend=ScriptedModel(["FINAL(x)"]), environment="local", tracing=provider).completion("c", "q")
    run = next(s for s in exporter.get_finished_spans() if s.name == "invoke_agent rlm")
    assert run.parent is not None and run.parent.span_id == outer.get_span_context().span_id


def test_tracing_options_are_checked_when_the_rlm_is_built() -> None:
    with pytest.raises(ConfigurationError, match="tracing='yes' must be True, False, None"):
        RLM(backend=ScriptedModel(["FINAL(x)"]), tracing="yes")
    RLM(backend=ScriptedModel(["FINAL(x)"]), tracing=False)


SCRIPT = """
import sys
from rlm_adapters import RLM, ScriptedModel
rlm = RLM(backend=ScriptedModel(['FINAL(x)']), environment='local')
rlm.completion('c', 'q')
print('opentelemetry' in ' '.join(sys.modules))
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
rlm.completion('c', 'q')
print(len(exporter.get_finished_spans()))
trace.set_tracer_provider(provider)
rlm.completion('c', 'q')
print(sorted({s.name for s in exporter.get_finished_spans()}))
"""


def test_by_default_a_run_is_traced_once_a_global_provider_is_configured() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    loaded, before, names = done.stdout.splitlines()
    assert loaded == "False"  # an untraced run does not even import OpenTelemetry
    assert before == "0"  # a provider that is not the global one is not used unless given
    assert names == "['chat scripted', 'invoke_agent rlm', 'rlm.iteration']"


def test_the_direct_route_and_its_fallback_are_spans_of_their_own(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    calls: list[int] = []

    def refusing(messages: list[Message]) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ModelError("prompt is too long: 9100 tokens > 8192 maximum", model="root-model", status_code=400)
        return "FINAL(from the rlm)"

    rlm = RLM(backend=ScriptedModel(refusing, model_name="root-model"), tracing=provider, direct_below_tokens=5_000)
    assert rlm.completion("a short note", "what does it say?").response == "from the rlm"
    runs = [span for span in exporter.get_finished_spans() if span.name == "invoke_agent rlm"]
    assert [span.attributes["rlm.route"] for span in runs] == ["direct", "rlm"]  # type: ignore[index]
    assert "refused it as too long" in str(runs[0].attributes["rlm.rerouted"])  # type: ignore[index]
    exporter.clear()
    plain = RLM(backend=ScriptedModel(lambda m: "a plain answer", model_name="root-model"), tracing=provider,
                direct_below_tokens=5_000)  # fmt: skip
    assert plain.completion("a short note", "what does it say?").response == "a plain answer"
    spans = exporter.get_finished_spans()
    run = next(span for span in spans if span.name == "invoke_agent rlm")
    assert run.attributes["rlm.route"] == "direct" and run.attributes["rlm.sandbox"] == "none"  # type: ignore[index]
    assert any(span.name.startswith("chat") for span in spans)  # the one call is a span under the run
