"""ChatRLM in LangChain's idioms: LCEL chains, callbacks, streaming, structured output, batches."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import random
import re
import socket
from typing import Any
from uuid import UUID

import pytest
import pytest_socket
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.exceptions import OutputParserException
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from pydantic import BaseModel

from rlm_adapters import ScriptedModel
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.settings import DEFAULTS
from rlm_adapters.langchain import PROGRESS_EVENT, ChatRLM, conversation_to_context
from rlm_adapters.langchain._engine import build_engine
from rlm_adapters.testing import turn_of


def repl(code: str) -> str:
    return f"```repl\n{code}\n```"


def chat(root: Any, leaf: Any = None, **options: Any) -> ChatRLM:
    """A ChatRLM over scripted models in the local sandbox."""
    others = [ScriptedModel(leaf, model_name="leaf")] if leaf is not None else []
    return ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(root, model_name="root"),
        other_backends=others,
        environment="local",
        **options,
    )


def asked(messages: list[Message]) -> str:
    """The user's message as ChatRLM quotes it to the root model."""
    return messages[1]["content"].split("It reads:\n\n", 1)[1].split("\n")[0]


def make_document(size: int, secret: str) -> str:
    rng = random.Random(7)
    lines, total = [], 0
    while total < size:
        line = f"{total:09d} INFO worker-{rng.randint(1, 99)} processed batch {rng.randint(1, 10**6)}"
        lines.append(line)
        total += len(line) + 1
    lines.insert(len(lines) * 2 // 3, f"NOTE the magic number is {secret}.")
    return "\n".join(lines)


def test_lcel_chain_over_a_two_megabyte_document() -> None:
    document = make_document(2 * 1024**2, "48213")
    seen: list[list[Message]] = []

    def root(messages: list[Message]) -> str:
        seen.append(messages)
        if turn_of(messages) == 0:  # type: ignore[arg-type]
            return repl(
                "pieces = [context[i:i + 400_000] for i in range(0, len(context), 400_000)]\n"
                "answers = llm_query_batched(['What is the magic number?\\n' + p for p in pieces])\n"
                "answer = next(a for a in answers if a != 'NONE')\nprint(len(pieces), answer)"
            )
        return repl('FINAL_VAR("answer")')

    def read_piece(messages: list[Message]) -> str:
        found = re.search(r"the magic number is (\d+)", messages[-1]["content"])
        return found.group(1) if found else "NONE"

    leaf = ScriptedModel(read_piece, model_name="leaf")
    llm = ChatRLM(
        direct_below_tokens=None,
        backend=ScriptedModel(root, model_name="root"),
        other_backends=[leaf],
        environment="local",
    )
    prompt = ChatPromptTemplate.from_messages(
        [("system", "You answer questions about logs."), ("human", "{document}\n\nQuestion: {question}")]
    )
    chain = prompt | llm | StrOutputParser()

    answer = chain.invoke({"document": document, "question": "What is the magic number?"})

    assert answer == "48213"
    assert len(leaf.calls) == 6  # 2 MiB in 400,000-character pieces, all sent in one batch
    system, first = seen[0][0]["content"], seen[0][1]["content"]
    assert "You answer questions about logs." in system  # the system message became instructions
    assert "Question: What is the magic number?" in first  # the root model is told the question
    assert max(len(m["content"]) for m in seen[-1]) < 20_000  # the document itself never reached it


def test_messages_become_the_context() -> None:
    context, query, instructions = conversation_to_context([HumanMessage("just this")])
    assert context == "just this" and "just this" in query and instructions is None

    messages = [
        SystemMessage("be brief"),
        HumanMessage("hello"),
        AIMessage("hi"),
        HumanMessage("how are you"),
    ]
    context, query, instructions = conversation_to_context(messages)
    assert context == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "how are you"},
    ]
    assert query.endswith("how are you") and instructions == "be brief"
    with pytest.raises(ValueError, match="human message"):
        conversation_to_context([SystemMessage("nobody asked")])

    llm = chat([repl("answer = context[-1]['content'] + '|' + str(len(context))\nFINAL_VAR('answer')")])
    assert llm.invoke(messages).content == "how are you|3"


class Recorder(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.chat_run: UUID | None = None

    async def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.chat_run = run_id
        self.log.append(("start", None))

    async def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        assert name == PROGRESS_EVENT
        self.log.append(("progress", (data["kind"], run_id)))

    async def on_llm_new_token(self, token: Any, **kwargs: Any) -> None:
        self.log.append(("token", token))

    async def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.log.append(("end", None))


SCRIPT = [repl("x = llm_query('hi')\nprint(x)"), "FINAL(done)"]


async def test_callbacks_see_progress_of_the_chat_model_run() -> None:
    recorder = Recorder()
    result = await chat(SCRIPT, ["leaf reply"]).ainvoke("question", config={"callbacks": [recorder]})

    assert result.content == "done"
    kinds = [data[0] for what, data in recorder.log if what == "progress"]
    assert kinds[0] == "run_start" and kinds[-1] == "final"
    assert {"root_call", "cell", "sub_call_start", "sub_call_end"} <= set(kinds)
    assert {data[1] for what, data in recorder.log if what == "progress"} == {recorder.chat_run}
    assert recorder.log[0][0] == "start" and recorder.log[-1][0] == "end"


async def test_sync_invoke_works_inside_a_running_loop() -> None:
    recorder = Recorder()
    result = chat(SCRIPT, ["leaf reply"]).invoke("question", config={"callbacks": [recorder]})
    assert result.content == "done"
    assert [d[0] for w, d in recorder.log if w == "progress"][-1] == "final"


async def test_streaming_order_progress_then_answer_chunks() -> None:
    answer = "word " * 500  # long enough to arrive as several chunks
    llm = chat([repl(f"answer = {answer!r}\nFINAL_VAR('answer')")])
    order: list[str] = []
    chunks = []
    async for event in llm.astream_events("question", version="v2"):
        if event["event"] == "on_custom_event":
            order.append(f"progress:{event['data']['kind']}")
        elif event["event"] == "on_chat_model_stream":
            order.append("chunk")
            chunks.append(event["data"]["chunk"])
    first_chunk = order.index("chunk")
    assert order[0] == "progress:run_start" and order[first_chunk - 1] == "progress:final"
    assert all(item == "chunk" for item in order[first_chunk:]) and len(chunks) >= 3
    assert "".join(c.content for c in chunks) == answer
    assert chunks[-1].chunk_position == "last" and all(c.chunk_position is None for c in chunks[:-1])
    assert chunks[-1].usage_metadata["total_tokens"] > 0  # usage once, on the last chunk
    assert all(c.usage_metadata is None for c in chunks[:-1])

    sync_chunks = list(llm.stream("question"))  # the sync path, from inside this running loop
    assert "".join(str(c.content) for c in sync_chunks) == answer and sync_chunks[-1].chunk_position == "last"


def test_usage_and_metadata_cover_every_depth(tmp_path: Any) -> None:
    from rlm_adapters import RLMLogger

    leaf = lambda _m: LMResponse(text="sub", input_tokens=100, output_tokens=10, model="leaf")  # noqa: E731
    root = [
        LMResponse(text=repl("x = llm_query('a')"), input_tokens=1000, output_tokens=20, model="root"),
        LMResponse(text="FINAL(ok)", input_tokens=1100, output_tokens=5, model="root"),
    ]
    result = chat(root, leaf, logger=RLMLogger(tmp_path)).invoke("q")
    assert result.usage_metadata == {"input_tokens": 2200, "output_tokens": 35, "total_tokens": 2235}
    meta = result.response_metadata
    assert meta["model_name"] == "root" and meta["finish_reason"] == "final" and meta["iterations"] == 2
    assert meta["usage"]["by_model"]["leaf"]["calls"] == 1 and meta["cost"] == 0.0
    assert meta["trajectory_file"] and str(tmp_path) in meta["trajectory_file"]


def test_stop_sequences_cut_the_answer_not_the_code() -> None:
    llm = chat([repl("x = 1"), "FINAL(alpha STOP beta)"])
    assert llm.invoke("q", stop=["STOP"]).content == "alpha "
    assert chat(["FINAL(alpha STOP beta)"], stop=["beta"]).invoke("q").content == "alpha STOP "


class Joke(BaseModel):
    setup: str
    punchline: str


def test_structured_output_valid_value() -> None:
    llm = chat([repl("answer = {'setup': 'Why?', 'punchline': 'Because.'}\nFINAL_VAR('answer')")])
    assert llm.with_structured_output(Joke).invoke("a joke") == Joke(setup="Why?", punchline="Because.")
    raw = llm.with_structured_output(Joke.model_json_schema(), include_raw=True).invoke("a joke")
    assert raw["parsed"] == {"setup": "Why?", "punchline": "Because."} and raw["parsing_error"] is None


def test_structured_output_invalid_value_goes_back_once() -> None:
    calls: list[list[Message]] = []

    def root(messages: list[Message]) -> str:
        calls.append(list(messages))  # the loop keeps appending to `messages`
        if len(calls) == 1:
            return repl("answer = {'setup': 1}\nFINAL_VAR('answer')")
        return repl("answer = {'setup': 'a', 'punchline': 'b'}\nFINAL_VAR('answer')")

    assert chat(root).with_structured_output(Joke).invoke("a joke") == Joke(setup="a", punchline="b")
    feedback = calls[1][-1]["content"]
    assert "rejected" in feedback and "punchline: Field required" in feedback and "should be a valid string" in feedback


def test_structured_output_invalid_twice_is_a_clear_error() -> None:
    llm = chat([repl("answer = {'setup': 'only'}\nFINAL_VAR('answer')")])
    with pytest.raises(OutputParserException, match="punchline: Field required"):
        llm.with_structured_output(Joke).invoke("a joke")


def test_langchain_chat_models_as_root_and_sub_model() -> None:
    root = GenericFakeChatModel(
        messages=iter([AIMessage(repl("x = llm_query('hi')\nprint(x)")), AIMessage("FINAL_VAR('x')")])
    )
    sub = GenericFakeChatModel(
        messages=iter(
            [
                AIMessage(
                    "from the sub model",
                    usage_metadata={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
                )
            ]
        )
    )
    result = ChatRLM(direct_below_tokens=None, root_model=root, sub_model=sub, environment="local").invoke("q")
    assert result.content == "from the sub model"
    usage = result.response_metadata["usage"]
    assert usage["sub"] == {
        "calls": 1,
        "input_tokens": 7,
        "output_tokens": 3,
        "cost": 0.0,
    }  # its own usage_metadata
    assert usage["root"]["calls"] == 2 and result.response_metadata["model_name"] == "generic-fake-chat-model"


async def test_abatch_runs_concurrently_within_max_concurrency() -> None:
    in_flight, peak = 0, 0
    everyone = asyncio.Event()

    async def root(messages: list[Message]) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        if in_flight == 3:
            everyone.set()
        try:
            # Three runs must be in flight together: if they ran one by one this would time out.
            await asyncio.wait_for(everyone.wait(), 10)
        finally:
            in_flight -= 1
        return f"FINAL({asked(messages)})"

    results = await chat(root).abatch(["a", "b", "c"])
    assert [r.content for r in results] == ["a", "b", "c"] and peak == 3

    in_flight, peak = 0, 0

    async def slow_root(messages: list[Message]) -> str:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.05)  # a window in which a second run would start, were it allowed to
        in_flight -= 1
        return "FINAL(x)"

    await chat(slow_root).abatch(["a", "b", "c"], config={"max_concurrency": 1})
    assert peak == 1


class SyncRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.kinds: list[str] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.kinds.append(data["kind"])


def test_sync_batch_keeps_order_and_reports_progress() -> None:
    recorder = SyncRecorder()
    llm = chat(lambda m: f"FINAL({asked(m)})")
    results = llm.batch(["x", "y"], config={"callbacks": [recorder]})
    assert [r.content for r in results] == ["x", "y"]
    assert recorder.kinds.count("final") == 2


async def test_invoke_inside_a_streamed_graph_still_reports_progress_and_tokens() -> None:
    """LangGraph-style: a node calls `ainvoke`, the caller streams events of the whole graph."""
    llm = chat([repl("x = 1"), "FINAL(streamed answer)"])

    async def node(question: str) -> str:
        return str((await llm.ainvoke(question)).content)

    kinds, tokens = [], []
    async for event in RunnableLambda(node).astream_events("q", version="v2"):
        if event["event"] == "on_custom_event":
            kinds.append(event["data"]["kind"])
        elif event["event"] == "on_chat_model_stream":
            tokens.append(event["data"]["chunk"].content)
    assert kinds[0] == "run_start" and kinds[-1] == "final"
    assert "".join(tokens) == "streamed answer"


def test_streaming_flag_sends_tokens_on_invoke() -> None:
    tokens: list[str] = []

    class Tokens(BaseCallbackHandler):
        def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
            tokens.append(token)

    chat(["FINAL(abc)"], streaming=True).invoke("q", config={"callbacks": [Tokens()]})
    assert tokens == ["abc"]
    tokens.clear()
    chat(["FINAL(abc)"]).invoke("q", config={"callbacks": [Tokens()]})
    assert tokens == []


@pytest.mark.filterwarnings("ignore:A test tried to use socket")
def test_only_localhost_is_reachable() -> None:
    """The guard the standard suites rely on: anything but 127.0.0.1 is refused."""
    with pytest.raises(pytest_socket.SocketConnectBlockedError):
        socket.create_connection(("203.0.113.9", 80), timeout=1)


def test_standard_parameters_reach_every_sdk_model(lc_server: Any, chat_options: dict[str, Any]) -> None:
    llm = ChatRLM(
        direct_below_tokens=None,
        **{**chat_options, "temperature": 0.25, "max_tokens": 77, "timeout": 9.0},
        other_backends=["openai"],
        other_backend_kwargs=[{"model_name": "leaf-model"}],
    )
    engine = llm._engine()
    for kwargs in (engine.backend_kwargs, engine.other_backend_kwargs[0]):
        assert {k: kwargs[k] for k in ("temperature", "max_tokens", "timeout", "max_retries", "api_key")} == {
            "temperature": 0.25,
            "max_tokens": 77,
            "timeout": 9.0,
            "max_retries": 0,
            "api_key": "test-key",
        }
        assert kwargs["base_url"] == lc_server.base_url
    assert engine.backend_kwargs["model_name"] == "root-model"
    assert engine.other_backend_kwargs[0]["model_name"] == "leaf-model"

    result = llm.invoke("Hello", model="root-model-2")  # a per-call model override
    assert result.response_metadata["model_name"] == "root-model-2"
    assert lc_server.counters.by_model["root-model-2"] == 2 and lc_server.counters.by_model["leaf-model"] == 1
    assert "root-model" not in lc_server.counters.by_model


def test_a_default_chat_model_builds_an_engine_with_the_engines_defaults() -> None:
    """ChatRLM restates no default: what it leaves unset is what `RLM` leaves unset (but raise_on_error: the
    chat model raises `RLMRunFailed` itself, after giving a structured-output parser the failed run's value)."""
    engine = ChatRLM(direct_below_tokens=None, backend=ScriptedModel(["FINAL(x)"], model_name="root"))._engine()
    assert engine.settings == dataclasses.replace(DEFAULTS, raise_on_error=False)


def test_the_run_timeout_and_the_request_timeout_are_two_names() -> None:
    """`run_timeout` is the run's wall clock (`RLM`'s keyword of that name); LangChain's standard `timeout` is
    one model request's (kept as the attribute `request_timeout`, as ChatOpenAI names it), never the run's."""
    llm = ChatRLM(
        direct_below_tokens=None, backend=ScriptedModel(["FINAL(x)"], model_name="root"), run_timeout=42.0, timeout=7.0
    )
    assert (llm.run_timeout, llm.request_timeout) == (42.0, 7.0)
    assert llm._engine().limits.timeout == 42.0
    assert (
        ChatRLM(direct_below_tokens=None, backend=ScriptedModel(["FINAL(x)"]), request_timeout=8.0).request_timeout
        == 8.0
    )


def test_other_backend_kwargs_of_another_length_are_refused_not_cut() -> None:
    """One dict per sub backend, as for `RLM`: a second backend without its dict is an error, not dropped."""
    with pytest.raises(ValueError, match="other_backend_kwargs has 1 entries for 2 other_backends"):
        ChatRLM(
            direct_below_tokens=None,
            backend=ScriptedModel(["FINAL(x)"]),
            other_backends=["openai", "openai"],
            other_backend_kwargs=[{"model_name": "a", "api_key": "k"}],
        )


def test_a_missing_model_fails_at_construction() -> None:
    with pytest.raises(ValueError, match="model_name"):
        ChatRLM(direct_below_tokens=None, base_url="http://127.0.0.1:9/v1", environment="local")


def test_leaving_the_sync_event_stream_early_cancels_the_run() -> None:
    """The consumer leaves after the first event: the run (50 turns of 1 s) is cancelled, not waited for, and
    its thread has ended when `close` returns."""
    import threading
    import time

    from langchain_core.messages import HumanMessage

    from rlm_adapters import RLM, ScriptedModel
    from rlm_adapters.langchain._run import start
    from rlm_adapters.langchain._thread_inputs import ThreadInputs

    def root(messages: list[dict[str, str]]) -> str:
        return "```repl\nimport time\ntime.sleep(1)\n```"

    def engine(model: str | None) -> RLM:
        return RLM(backend=ScriptedModel(root), environment="local", max_iterations=50)

    started = time.monotonic()
    handle = start(engine, [HumanMessage("a question")], {}, ThreadInputs(), own_thread=True)
    first = next(handle.iter_events())
    handle.close()  # the run's task is cancelled, then its thread joined
    assert getattr(first, "kind", None) == "run_start"
    assert handle.done() and time.monotonic() - started < 20  # the uncancelled run would take about 50 s
    assert "rlm-chat-run" not in [thread.name for thread in threading.enumerate()]


@pytest.mark.parametrize(
    ("backend", "backend_kwargs"),
    [
        ("gemini", {"api_key": "k"}),
        ("bedrock", {"region_name": "us-east-1"}),
        ("litellm", {}),
    ],
)
def test_the_model_name_reaches_backends_with_their_own_settings(backend: str, backend_kwargs: dict[str, Any]) -> None:
    module = {"gemini": "google.genai", "bedrock": "boto3", "litellm": "litellm"}[backend]
    if importlib.util.find_spec(module.split(".")[0]) is None:  # not imported here: litellm fetches prices on import
        pytest.skip(f'needs {module}: pip install "rlm-adapters[{backend}]"')
    llm = ChatRLM(
        direct_below_tokens=None,
        model="some-model",
        backend=backend,
        backend_kwargs=backend_kwargs,
        environment="local",
    )
    assert build_engine(llm).root_model_name == "some-model"
    assert build_engine(llm, "other-model").root_model_name == "other-model"


def test_context_preview_chars_reaches_the_engine_from_the_field() -> None:
    """An `RLM` option added by its declaration alone (and one field line here) works through ChatRLM."""
    secret = "TOPSECRET-7431"
    shown: list[str] = []

    def root(messages: list[Message]) -> str:
        shown.append(str(messages[1]["content"]))
        return "```repl\nFINAL('done')\n```"

    for chars in (0, None):
        extra = {} if chars is None else {"context_preview_chars": chars}
        llm = ChatRLM(
            direct_below_tokens=None, backend=ScriptedModel(root, model_name="root"), environment="local", **extra
        )
        question = [HumanMessage(f"{secret} {'filler ' * 200}"), HumanMessage("what is it?")]
        assert llm.invoke(question).content == "done"
    hidden, default = shown
    assert secret not in hidden and "<preview>" not in hidden
    assert secret in default  # the control: by default its beginning is shown
    assert (
        ChatRLM(direct_below_tokens=None, backend=ScriptedModel(["x"]), context_preview_chars=7)
        ._engine()
        .context_preview_chars
        == 7
    )
