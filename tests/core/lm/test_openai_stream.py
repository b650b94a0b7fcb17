"""The OpenAI client streams its replies, so that a call cut on the way counts what had arrived (issue 54)."""

from __future__ import annotations

import pytest

from rlm_adapters import RLM
from rlm_adapters.core.lm.openai_client import OpenAIClient
from rlm_adapters.errors import ConfigurationError, RLMRunFailed
from rlm_adapters.testing import FakeOpenAIServer

LONG_REPLY = "```repl\nprint(len(context))\n```\n" + "Thinking it over. " * 200


def _rlm(server: FakeOpenAIServer, **options: object) -> RLM:
    kwargs = {"model_name": "gpt-5", "base_url": server.base_url, "api_key": "k"}
    return RLM(backend="openai", backend_kwargs=kwargs, environment="local", **options)  # type: ignore[arg-type]


def test_a_streamed_reply_asks_for_usage_and_is_counted_as_the_server_billed_it() -> None:
    with FakeOpenAIServer(["```repl\nprint(llm_query('magic number 7'))\n```", "FINAL(done)"]) as server:
        server.keep_requests = True
        result = _rlm(server).completion("ctx", "q")
        assert result.response == "done"
        sent = [entry["options"] for entry in server.requests_log]
        assert all(o.get("stream") is True and o["stream_options"] == {"include_usage": True} for o in sent)
        total = result.usage_summary.total
        assert (total.input_tokens, total.output_tokens) == (
            server.counters.prompt_tokens,
            server.counters.completion_tokens,
        )


def test_a_stream_cut_by_the_runs_deadline_counts_the_output_that_had_arrived() -> None:
    with FakeOpenAIServer([LONG_REPLY]) as server:
        server.trickle_next(interval=0.05, chunk=400)  # the reply's events arrive over about two seconds
        result = _rlm(server, run_timeout=1.0).completion("ctx", "q")
        total = result.usage_summary.total
        assert result.finish_reason == "timeout"
        assert total.cut_calls == 1 and total.calls == 1
        # Part of the reply had arrived, and no more than the server had generated for it.
        assert 0 < total.output_tokens < server.counters.completion_tokens
        assert total.input_tokens > 0


def test_a_stream_that_ends_before_its_finish_is_an_error_and_its_output_still_counts() -> None:
    def cut_short(payload: object) -> bytes:
        return b'data: {"choices": [{"index": 0, "delta": {"content": "half a rep"}, "finish_reason": null}]}\n\n'

    with FakeOpenAIServer(["FINAL(never)"]) as server:
        server.reshape_next(cut_short)
        with pytest.raises(RLMRunFailed) as caught:
            _rlm(server, max_errors=1).completion("ctx", "q")
        result = caught.value.result
        assert result.finish_reason == "error"
        assert "the stream ended before its reply was complete" in (result.error or "")
        total = result.usage_summary.total
        assert total.cut_calls == 1 and total.output_tokens >= 1


def test_stream_is_a_setting_that_takes_only_true_or_false() -> None:
    with FakeOpenAIServer(["FINAL(plain)"]) as server:
        server.keep_requests = True
        assert _rlm(server).completion("ctx", "q").response == "plain"
        kwargs = {"model_name": "gpt-5", "base_url": server.base_url, "api_key": "k", "stream": False}
        assert (
            RLM(backend="openai", backend_kwargs=kwargs, environment="local").completion("c", "q").response == "plain"
        )
        assert "stream" not in server.requests_log[-1]["options"]
    with pytest.raises(ConfigurationError, match=r"stream='yes' must be True or False"):
        OpenAIClient("gpt-5", api_key="k", stream="yes")
