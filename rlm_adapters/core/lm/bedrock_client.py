"""Amazon Bedrock through boto3's Bedrock Runtime **Converse** API: one request shape for every model family.

boto3 is synchronous, so each call runs in a thread pool owned by the client (threads are started on
demand, up to ``max_workers``: by default the engine's default ``max_concurrency`` ceiling, so the engine's
limit, not the pool, decides how many calls run); the event loop never waits on a socket. botocore's own
retries are off: the engine retries (or the client, given ``max_retries``), honouring ``Retry-After``,
through `call_with_retries`, which also bounds each whole request (`timeout`).

The thread must stop too, not only the wait for it: botocore's read timeout is per read, and it reads the
whole body before returning. So the client reads the body itself, from botocore's ``before-send`` event
(`_BoundedSender`): botocore's own HTTP session sends the request (its proxies, TLS and pool), and the
reply is read in chunks, each read bounded by the time left before the attempt's end or the run's deadline,
whichever comes first, and stopped past ``max_reply_bytes``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
import time
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._bedrock_send import BoundedSender
from rlm_adapters.core.lm._caching import breakpoints
from rlm_adapters.core.lm._common import split_system
from rlm_adapters.core.lm._reply import (
    cut_at_cap,
    field_of,
    reading,
    reply_of,
    reply_text,
    usage_field,
    with_cache_tokens,
)
from rlm_adapters.core.lm._retry import Failure, is_retryable_status, parse_retry_after
from rlm_adapters.core.lm._sdk_client import SDKClient
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.lm.call_context import capped
from rlm_adapters.core.lm.deadline import current_deadline
from rlm_adapters.core.lm.limiter import DEFAULT_CEILING
from rlm_adapters.core.lm.reply_identity import request_identity
from rlm_adapters.errors import ConfigurationError, ModelError

SESSION_KEYS = ("region_name", "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "profile_name")
CLIENT_KEYS = frozenset({*SESSION_KEYS, "endpoint_url", "base_url", "max_workers", "prompt_caching"})
# Converse's prompt-cache breakpoint: the prefix up to this block is cached (Anthropic's models: 5 minutes).
CACHE_POINT: dict[str, Any] = {"cachePoint": {"type": "default"}}
# Friendly names for Converse's `inferenceConfig` fields.
INFERENCE_SHORTCUTS = {
    "max_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "stop_sequences": "stopSequences",
}
# The engine's default ceiling on calls in flight (RLM's max_concurrency): below it, the engine's adaptive limit
# decides how many calls run, and the pool starts threads (and botocore connections) only as calls need them.
DEFAULT_MAX_WORKERS = DEFAULT_CEILING
RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "InternalServerException",
        "ModelNotReadyException",
        "ModelTimeoutException",
    }
)


@functools.cache
def converse_request_keys() -> frozenset[str]:
    """The Converse request's top-level fields, from botocore's service model (what the SDK will accept)."""
    botocore_session = require("botocore.session", extra="bedrock", feature="the bedrock backend")
    model = botocore_session.get_session().get_service_model("bedrock-runtime")
    members = model.operation_model("Converse").input_shape.members
    return frozenset(members) - {"modelId", "messages", "system"}


def merge_turns(turns: list[Message]) -> list[dict[str, Any]]:
    """Converse messages as Converse accepts them: roles alternating from a user turn (consecutive turns of
    one role merged), and no blank text block (an empty reply in the history is sent as ``(empty)``)."""
    out: list[dict[str, Any]] = []
    for turn in turns:
        block = {"text": turn["content"] if turn["content"].strip() else "(empty)"}
        if out and out[-1]["role"] == turn["role"]:
            out[-1]["content"].append(block)
        else:
            out.append({"role": turn["role"], "content": [block]})
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [{"text": "(continue)"}]})
    return out


def caches_prompts(model_id: str) -> bool:
    """Whether the Bedrock model takes the Anthropic-style cache points this client sends (Claude models)."""
    return "anthropic." in model_id or model_id.rsplit("/", 1)[-1].startswith("claude")


def add_cache_points(system: list[dict[str, Any]], turns: list[dict[str, Any]]) -> None:
    """Put cache points after the system prompt and on the stable prefix of the history (`_caching`)."""
    if system:
        system.append(dict(CACHE_POINT))
    for index in breakpoints(len(turns), bool(system)):
        turns[index]["content"].append(dict(CACHE_POINT))


class BedrockClient(SDKClient):
    """An `LMClient` over Bedrock Runtime's Converse API.

    Args:
        model_name: A Bedrock model id or inference profile, e.g.
            ``"us.anthropic.claude-sonnet-4-5-20250929-v1:0"`` or ``"amazon.nova-pro-v1:0"``.
        **kwargs: ``region_name``, ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``,
            ``profile_name`` (else the usual AWS chain: environment, profile, instance role; a Bedrock API
            key in ``AWS_BEARER_TOKEN_BEDROCK`` is sent as a bearer token); ``region`` is ``region_name``;
            ``endpoint_url`` (alias ``base_url``); ``prompt_caching=False`` (no cache points; by default
            Claude models get them on the system prompt and the history's stable prefix, and the usage's
            cache reads and writes are reported apart); ``timeout`` (seconds per request, default 600);
            ``max_retries`` (the client retries; default: the engine does); ``max_workers`` (threads, default
            256); ``max_tokens``, ``temperature``, ``top_p``, ``stop_sequences`` (Converse's ``inferenceConfig``);
            and any other top-level Converse field by its API name (``additionalModelRequestFields``, ...).
    """

    backend = "bedrock"
    provider = "Bedrock"

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        self._boto3 = require("boto3", extra="bedrock", feature="the bedrock backend")
        if "api_key" in kwargs:
            # The reference's Bedrock client took a Bedrock API key; boto3 reads one from the environment.
            raise ConfigurationError(
                "backend 'bedrock' takes no api_key: for a Bedrock API key set AWS_BEARER_TOKEN_BEDROCK (boto3 "
                "sends it as a bearer token); else pass aws_access_key_id / aws_secret_access_key or use the AWS chain"
            )
        if "region" in kwargs and "region_name" not in kwargs:
            kwargs["region_name"] = kwargs.pop("region")  # the reference's spelling
        super().__init__(model_name, kwargs, {*CLIENT_KEYS, *INFERENCE_SHORTCUTS, *converse_request_keys()})
        caching = kwargs.pop("prompt_caching", True)
        if not isinstance(caching, bool):
            raise ConfigurationError(f"backend 'bedrock': prompt_caching={caching!r} must be True or False")
        self._caching = caching and caches_prompts(self._model_name)
        self._sender = BoundedSender(self._max_reply_bytes)
        self._session_kwargs = {k: kwargs.pop(k) for k in SESSION_KEYS if k in kwargs}
        endpoint_url, base_url = kwargs.pop("endpoint_url", None), kwargs.pop("base_url", None)
        self._endpoint_url: str | None = endpoint_url or base_url
        workers = kwargs.pop("max_workers", DEFAULT_MAX_WORKERS)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ConfigurationError(f"backend 'bedrock': max_workers={workers!r} must be an integer >= 1")
        self._max_workers = workers
        # The session resolves the region from backend_kwargs, AWS_DEFAULT_REGION or the profile; botocore
        # does not read AWS_REGION (which AWS's runtimes and most tools set), so it is passed on here.
        if "region_name" not in self._session_kwargs and os.environ.get("AWS_REGION"):
            self._session_kwargs["region_name"] = os.environ["AWS_REGION"]
        try:
            self._session = self._boto3.session.Session(**self._session_kwargs)
        except Exception as exc:  # botocore's ProfileNotFound and friends
            raise ConfigurationError(f"backend 'bedrock': {exc}") from exc
        if not self._session.region_name:
            raise ConfigurationError(
                "the bedrock backend needs a region: backend_kwargs={'region_name': 'us-east-1'}, "
                "or set AWS_REGION (or AWS_DEFAULT_REGION)"
            )
        inference = dict(kwargs.pop("inferenceConfig", None) or {})
        for short, api_name in INFERENCE_SHORTCUTS.items():
            if short in kwargs:
                inference[api_name] = kwargs.pop(short)
        self._request = dict(kwargs)
        if inference:
            self._request["inferenceConfig"] = inference
        self._client: Any = None
        self._lock = threading.Lock()  # the first concurrent calls build one boto3 client, not several
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def _sdk_client(self) -> Any:
        # Built on first use: a boto3 client costs tens of milliseconds; RLM() builds clients only to check settings.
        with self._lock:
            return self._client or self._build_client()

    def _build_client(self) -> Any:
        from botocore.config import Config  # type: ignore[import-untyped]

        config = Config(
            retries={"total_max_attempts": 1},  # ours honour Retry-After and the per-request timeout
            read_timeout=self._policy.request_timeout,
            connect_timeout=min(self._policy.request_timeout, 10.0),
            max_pool_connections=self._max_workers,
        )
        client = self._session.client("bedrock-runtime", endpoint_url=self._endpoint_url, config=config)
        self._sender.attach(client)
        self._client = client
        return client

    @property
    def endpoint(self) -> str:
        """Where calls go (the engine learns a concurrency limit per endpoint)."""
        return self._endpoint_url or f"bedrock-runtime.{self._session.region_name}"

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: backend, endpoint, model, request settings (no secrets)."""
        return request_identity("bedrock", self.endpoint, self._model_name, self._request)

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One Converse call."""
        system, turns = split_system(messages)
        blocks = [{"text": system}] if system else []
        merged = merge_turns(turns)
        if self._caching:
            add_cache_points(blocks, merged)
        request: dict[str, Any] = {"modelId": self._model_name, "messages": merged, **self._request}
        inference = dict(request.get("inferenceConfig") or {})
        cap = capped(inference.get("maxTokens"))
        if cap is not None:
            request["inferenceConfig"] = {**inference, "maxTokens": cap}
        if blocks:
            request["system"] = blocks
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix="rlm-bedrock")
        loop = asyncio.get_running_loop()
        pool = self._pool
        # Building the boto3 client (service model, endpoint rules) is not part of a request's timeout.
        await loop.run_in_executor(pool, self._sdk_client)

        async def attempt() -> dict[str, Any]:
            # The thread reads no later than this attempt's end or the run's deadline (threads see no contextvars).
            ends = time.monotonic() + self._policy.request_timeout
            run_deadline = current_deadline()
            if run_deadline is not None:
                ends = min(ends, run_deadline)
            converse = functools.partial(self._converse, request, ends)
            result: dict[str, Any] = await loop.run_in_executor(pool, converse)
            return result

        response = await self._send(attempt, self._classify)
        return self._parse(response, messages)

    def _converse(self, request: dict[str, Any], ends: float) -> dict[str, Any]:
        with self._sender.until(ends):
            response: dict[str, Any] = self._sdk_client().converse(**request)
        return response

    def _parse(self, response: dict[str, Any], messages: list[Message]) -> LMResponse:
        source = f"Bedrock call to model {self._model_name!r}"
        with reading(source, self._model_name):
            message = field_of(field_of(response, "output"), "message")
            content = field_of(message, "content")
            if not isinstance(content, list):
                body = (
                    {k: v for k, v in response.items() if k != "ResponseMetadata"}
                    if isinstance(response, dict)
                    else response
                )
                raise ModelError(
                    f"{source} returned a body that is not a Converse response "
                    f"(no output.message.content): {str(body)[:200]!r}",
                    model=self._model_name,
                )
            text = reply_text(content, source=source, model=self._model_name)
            usage = field_of(response, "usage")
            # Converse's inputTokens leave out what the cache read or wrote, as Anthropic's own API does.
            read = usage_field(usage, "cacheReadInputTokens")
            write = usage_field(usage, "cacheWriteInputTokens")
            plain = field_of(usage, "inputTokens")
            return reply_of(
                text,
                model=self._model_name,
                messages=messages,
                input_tokens=with_cache_tokens(plain, read, write),
                output_tokens=field_of(usage, "outputTokens"),
                cache_read_tokens=read,
                cache_write_tokens=write,
                truncated=cut_at_cap(field_of(response, "stopReason")),
            )

    def _classify(self, exc: Exception) -> Failure | None:
        from botocore.exceptions import (  # type: ignore[import-untyped]
            BotoCoreError,
            ClientError,
            ConnectionClosedError,
            EndpointConnectionError,
            NoCredentialsError,
            ReadTimeoutError,
        )

        if isinstance(exc, ClientError):
            error = exc.response.get("Error", {})
            meta = exc.response.get("ResponseMetadata", {})
            status = meta.get("HTTPStatusCode")
            code = str(error.get("Code", ""))
            return Failure(
                message=f"{code}: {error.get('Message') or exc}" if code else str(exc),
                status=status,
                retryable=is_retryable_status(status) or code in RETRYABLE_CODES,
                retry_after=parse_retry_after(meta.get("HTTPHeaders")),
            )
        if isinstance(exc, NoCredentialsError):
            return Failure(
                "no AWS credentials found: pass aws_access_key_id and aws_secret_access_key in backend_kwargs, "
                "or set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or AWS_PROFILE"
            )
        if isinstance(exc, ReadTimeoutError | EndpointConnectionError | ConnectionClosedError | TimeoutError):
            return Failure(f"{type(exc).__name__}: {exc}", retryable=True)
        if type(exc).__module__.startswith("urllib3"):  # raised while the body was read (`BoundedSender`)
            return Failure(f"{type(exc).__name__}: {exc}", retryable=True)
        if isinstance(exc, BotoCoreError | ValueError):  # ValueError: a body botocore could not parse
            return Failure(f"{type(exc).__name__}: {exc}")
        return None

    async def aclose(self) -> None:
        """Stop the thread pool and close the connection pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        client, self._client = self._client, None
        if client is not None:
            client.close()
