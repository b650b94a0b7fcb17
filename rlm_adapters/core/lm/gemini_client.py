"""Google's Gemini models through the `google-genai` SDK: the Gemini API (an API key) or Vertex AI.

The SDK's own retries stay off: the engine retries (or the client, given ``max_retries``), honouring
``Retry-After``, through `call_with_retries`, which also bounds each whole request (`timeout`, given to the
SDK too as its per-read timeout).

The SDK reads through aiohttp when it is installed, which has a whole-request timeout but no way to stop a
body past a size; so the client hands the SDK an httpx `AsyncClient` of its own (``httpx_async_client``,
which also turns aiohttp off) carrying the reply cap's hooks (`_http.py`: ``max_reply_bytes``). Not covered:
Vertex AI with a client certificate (mTLS), where the SDK sends through google-auth's own session.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._common import estimated_input, split_system
from rlm_adapters.core.lm._http import reply_cap_hooks
from rlm_adapters.core.lm._reply import cut_at_cap, field_of, reading, shown, token_count, usage_field
from rlm_adapters.core.lm._retry import Failure, is_retryable_status, parse_retry_after
from rlm_adapters.core.lm._sdk_client import SDKClient
from rlm_adapters.core.lm._sdk_setup import shared_ssl_context
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.lm.call_context import capped
from rlm_adapters.core.lm.reply_identity import request_identity
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.errors import ConfigurationError, ModelError

CLIENT_KEYS = frozenset({"api_key", "vertexai", "project", "location", "credentials"})
# Part fields that carry something other than text (a tool call, code, a file): refused, never dropped.
OTHER_PARTS = (
    "function_call",
    "function_response",
    "executable_code",
    "code_execution_result",
    "inline_data",
    "file_data",
)
HTTP_KEYS = frozenset({"base_url", "api_version", "headers"})
KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


class GeminiClient(SDKClient):
    """An `LMClient` over `google.genai.Client(...).aio.models.generate_content`.

    Args:
        model_name: The model, e.g. ``"gemini-2.5-flash"``.
        **kwargs: ``api_key`` (else ``GOOGLE_API_KEY`` / ``GEMINI_API_KEY``), or ``vertexai=True`` with
            ``project`` and ``location`` (else ``GOOGLE_CLOUD_PROJECT`` / ``GOOGLE_CLOUD_LOCATION``) and
            Application Default Credentials or ``credentials``; ``base_url``, ``api_version``, ``headers``
            (the SDK's ``http_options``); ``timeout`` (seconds per request, default 600); ``max_retries``
            (the client retries; default: the engine does); any `google.genai.types.GenerateContentConfig`
            field (``temperature``, ``max_output_tokens``, ``thinking_config``, ...) goes with every request.
    """

    backend = "gemini"
    provider = "Gemini"

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        self._genai = require("google.genai", extra="gemini", feature="the gemini backend")
        types = self._genai.types
        config_keys = set(types.GenerateContentConfig.model_fields) - {"system_instruction", "http_options"}
        super().__init__(model_name, kwargs, {*CLIENT_KEYS, *HTTP_KEYS, *config_keys})
        self._client_kwargs = {k: kwargs.pop(k) for k in CLIENT_KEYS if k in kwargs}
        http = {k: kwargs.pop(k) for k in HTTP_KEYS if k in kwargs}
        self._base_url = http.get("base_url")
        vertex = bool(self._client_kwargs.get("vertexai")) or _env_flag("GOOGLE_GENAI_USE_VERTEXAI")
        if not vertex and not self._client_kwargs.get("api_key") and not any(os.environ.get(v) for v in KEY_VARIABLES):
            raise ConfigurationError(
                "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY), pass backend_kwargs={'api_key': ...}, "
                "or use Vertex AI with backend_kwargs={'vertexai': True, 'project': ..., 'location': ...}"
            )
        self._http_options = types.HttpOptions(timeout=int(self._policy.request_timeout * 1000), **http)
        try:
            self._config = dict(types.GenerateContentConfig(**kwargs).model_dump(exclude_none=True))
        except ValueError as exc:  # pydantic's ValidationError: a value of the wrong type
            raise ConfigurationError(f"backend 'gemini': bad generation settings {sorted(kwargs)}: {exc}") from exc
        self._built: tuple[Any, Any] | None = None

    @classmethod
    def credentials_problem(cls, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        if settings.get("api_key") or any(environ.get(v) for v in (*KEY_VARIABLES, "GOOGLE_GENAI_USE_VERTEXAI")):
            return None
        return (
            "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY), or GOOGLE_GENAI_USE_VERTEXAI=true for Vertex AI"
        )

    async def _prepare_sdk(self) -> None:
        # In a worker thread: the SDK's client loads a CA bundle of its own (50-100 ms), which would hold the
        # event loop every run (the SDK keeps one HTTP session per loop, so a client is built per run).
        built = await asyncio.to_thread(self._build)
        if self._built is None:
            self._built = built

    def _build_sdk_client(self) -> tuple[Any, Any]:
        built, self._built = self._built, None
        assert built is not None  # `_prepare_sdk` made it
        return built

    async def _close_sdk_client(self, client: Any) -> None:
        sdk_client, http = client
        await sdk_client.aio.aclose()
        await http.aclose()  # the SDK leaves a client it was given open

    def _build(self) -> tuple[Any, Any]:
        import httpx

        http = httpx.AsyncClient(
            timeout=self._policy.request_timeout,
            event_hooks=reply_cap_hooks(httpx, self._max_reply_bytes),
            verify=shared_ssl_context(),  # one per process, not one per run
        )
        options = self._http_options.model_copy(update={"httpx_async_client": http})
        return self._genai.Client(**self._client_kwargs, http_options=options), http

    @property
    def endpoint(self) -> str:
        """Where calls go (the engine learns a concurrency limit per endpoint)."""
        if self._base_url:
            return str(self._base_url)
        if self._client_kwargs.get("vertexai"):
            return f"vertex:{self._client_kwargs.get('project')}/{self._client_kwargs.get('location')}"
        return "https://generativelanguage.googleapis.com"

    def cache_identity(self) -> dict[str, Any]:
        """What besides the messages decides a reply: backend, endpoint, model, request settings (no secrets)."""
        http = self._http_options.model_dump(exclude_none=True)
        chosen = {k: http[k] for k in ("api_version", "headers") if k in http}  # v1 or v1beta answers differently
        return request_identity(
            "gemini", self.endpoint, self._model_name, {**self._client_kwargs, **chosen, **self._config}
        )

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One ``generateContent`` call."""
        system, turns = split_system(messages)
        contents = [
            {"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]} for m in turns
        ]
        config = dict(self._config)
        cap = capped(config.get("max_output_tokens"))
        if cap is not None:
            config["max_output_tokens"] = cap
        if system:
            config["system_instruction"] = system
        client, _ = await self._sdk()

        async def attempt() -> Any:
            return await client.aio.models.generate_content(
                model=self._model_name, contents=contents, config=config or None
            )

        response = await self._send(attempt, self._classify)
        return self._parse(response, messages)

    def _parse(self, response: Any, messages: list[Message]) -> LMResponse:
        source = f"Gemini call to model {self._model_name!r}"
        with reading(source, self._model_name):
            candidates = field_of(response, "candidates")
            content = field_of(candidates[0], "content") if isinstance(candidates, list) and candidates else None
            if content is None:
                feedback = field_of(response, "prompt_feedback")
                reason = field_of(feedback, "block_reason") or field_of(feedback, "block_reason_message")
                detail = f" (blocked: {reason})" if reason else ""
                raise ModelError(f"{source} returned no candidate{detail}", model=self._model_name)
            text = self._text(field_of(content, "parts") or [], source)
            usage = field_of(response, "usage_metadata")
            prompt = token_count(field_of(usage, "prompt_token_count"))
            output = token_count(field_of(usage, "candidates_token_count"))
            thoughts = token_count(field_of(usage, "thoughts_token_count")) or 0  # billed as output tokens
            return LMResponse(
                text=text,
                input_tokens=prompt if prompt is not None else estimated_input(messages),
                output_tokens=(output if output is not None else estimate_tokens(text)) + thoughts,
                model=self._model_name,
                # Gemini's implicit (or explicit) context cache: part of prompt_token_count, at its cache rate.
                cache_read_tokens=usage_field(usage, "cached_content_token_count"),
                truncated=cut_at_cap(field_of(candidates[0], "finish_reason")),
            )

    def _text(self, parts: Any, source: str) -> str:
        """The text parts that are not thoughts; a part carrying something else (a tool call) is refused."""
        if not isinstance(parts, list):
            raise ModelError(f"{source} returned parts that are not a list: {shown(parts)}", model=self._model_name)
        texts = []
        for part in parts:
            if field_of(part, "thought") is True:
                continue  # thought summaries are not the answer
            text = field_of(part, "text")
            if isinstance(text, str):
                texts.append(text)
            elif text is not None or any(field_of(part, name) is not None for name in OTHER_PARTS):
                raise ModelError(
                    f"{source} returned a part the engine cannot read: {shown(part)} (expected text parts)",
                    model=self._model_name,
                )
        return "".join(texts)

    def _classify(self, exc: Exception) -> Failure | None:
        errors = self._genai.errors
        if isinstance(exc, errors.APIError):
            status = exc.code if isinstance(exc.code, int) else None
            headers = getattr(getattr(exc, "response", None), "headers", None)
            message = exc.message or str(exc)
            return Failure(
                message=f"{exc.status}: {message}" if exc.status else str(message),
                status=status,
                retryable=is_retryable_status(status),
                retry_after=parse_retry_after(dict(headers) if headers is not None else None),
            )
        name = type(exc).__module__
        if name.startswith(("aiohttp", "httpx", "httpcore")) or isinstance(exc, ConnectionError):
            return Failure(f"{type(exc).__name__}: {exc}", retryable=True)
        if isinstance(exc, ValueError):  # a body that is not JSON, or not a response the SDK can read
            return Failure(f"the response could not be read ({type(exc).__name__}: {exc})")
        return None
