"""Google's Gemini models through the `google-genai` SDK: the Gemini API (an API key) or Vertex AI.

The SDK's own retries stay off: the engine retries (or the client, given ``max_retries``), honouring
``Retry-After``, through `call_with_retries`, which also applies the per-request timeout (given to the SDK
too, so that its HTTP request ends as well).
"""

from __future__ import annotations

import os
from typing import Any

from rlm_adapters._extras import require
from rlm_adapters.core.lm._common import check_keys, estimated_input, require_model_name, split_system, usage_field
from rlm_adapters.core.lm._retry import Failure, RetryPolicy, call_with_retries, is_retryable_status, parse_retry_after
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.core.tokens import estimate_tokens
from rlm_adapters.errors import ConfigurationError, ModelError

CLIENT_KEYS = frozenset({"api_key", "vertexai", "project", "location", "credentials"})
HTTP_KEYS = frozenset({"base_url", "api_version", "headers"})
KEY_VARIABLES = ("GOOGLE_API_KEY", "GEMINI_API_KEY")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


class GeminiClient:
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

    def __init__(self, model_name: str, **kwargs: Any) -> None:
        self._genai = require("google.genai", extra="gemini", feature="the gemini backend")
        types = self._genai.types
        self._model_name = require_model_name("gemini", model_name)
        config_keys = set(types.GenerateContentConfig.model_fields) - {"system_instruction", "http_options"}
        check_keys("gemini", kwargs, {*CLIENT_KEYS, *HTTP_KEYS, "timeout", "max_retries", *config_keys})
        self._policy = RetryPolicy.from_kwargs("gemini", kwargs)
        self._client_kwargs = {k: kwargs.pop(k) for k in CLIENT_KEYS if k in kwargs}
        http = {k: kwargs.pop(k) for k in HTTP_KEYS if k in kwargs}
        self._base_url = http.get("base_url")
        vertex = bool(self._client_kwargs.get("vertexai")) or _env_flag("GOOGLE_GENAI_USE_VERTEXAI")
        if not vertex and not self._client_kwargs.get("api_key") and not any(os.environ.get(v) for v in KEY_VARIABLES):
            raise ConfigurationError(
                "no Gemini API key: set GEMINI_API_KEY (or GOOGLE_API_KEY), pass backend_kwargs={'api_key': ...}, "
                "or use Vertex AI with backend_kwargs={'vertexai': True, 'project': ..., 'location': ...}"
            )
        self._http_options = types.HttpOptions(timeout=int(self._policy.timeout * 1000), **http)
        try:
            self._config = dict(types.GenerateContentConfig(**kwargs).model_dump(exclude_none=True))
        except ValueError as exc:  # pydantic's ValidationError: a value of the wrong type
            raise ConfigurationError(f"backend 'gemini': bad generation settings {sorted(kwargs)}: {exc}") from exc
        self._client: Any = None

    @property
    def model_name(self) -> str:
        """The model this client calls."""
        return self._model_name

    @property
    def _sdk(self) -> Any:
        # Built on first use, inside the run's event loop (the SDK keeps one HTTP session per loop).
        if self._client is None:
            self._client = self._genai.Client(**self._client_kwargs, http_options=self._http_options)
        return self._client

    @property
    def endpoint(self) -> str:
        """Where calls go (the engine learns a concurrency limit per endpoint)."""
        if self._base_url:
            return str(self._base_url)
        if self._client_kwargs.get("vertexai"):
            return f"vertex:{self._client_kwargs.get('project')}/{self._client_kwargs.get('location')}"
        return "https://generativelanguage.googleapis.com"

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One ``generateContent`` call."""
        system, turns = split_system(messages)
        contents = [
            {"role": "model" if m["role"] == "assistant" else "user", "parts": [{"text": m["content"]}]} for m in turns
        ]
        config = dict(self._config)
        if system:
            config["system_instruction"] = system
        client = self._sdk

        async def attempt() -> Any:
            return await client.aio.models.generate_content(
                model=self._model_name, contents=contents, config=config or None
            )

        response = await call_with_retries(
            attempt, policy=self._policy, classify=self._classify, provider="Gemini", model=self._model_name
        )
        return self._parse(response, messages)

    def _parse(self, response: Any, messages: list[Message]) -> LMResponse:
        candidates = getattr(response, "candidates", None)
        if not candidates or candidates[0].content is None:
            feedback = getattr(response, "prompt_feedback", None)
            reason = getattr(feedback, "block_reason", None) or getattr(feedback, "block_reason_message", None)
            detail = f" (blocked: {reason})" if reason else ""
            raise ModelError(
                f"Gemini call to model {self._model_name!r} returned no candidate{detail}", model=self._model_name
            )
        # Thought summaries are not the answer; the text parts that are not thoughts are.
        parts = candidates[0].content.parts or []
        text = "".join(p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", False))
        usage = getattr(response, "usage_metadata", None)
        prompt = getattr(usage, "prompt_token_count", None)
        output = getattr(usage, "candidates_token_count", None)
        thoughts = getattr(usage, "thoughts_token_count", None) or 0  # billed as output tokens
        return LMResponse(
            text=text,
            input_tokens=prompt if prompt is not None else estimated_input(messages),
            output_tokens=(output if output is not None else estimate_tokens(text)) + thoughts,
            model=self._model_name,
            # Gemini's implicit (or explicit) context cache: part of prompt_token_count, priced at its cache rate.
            cache_read_tokens=usage_field(usage, "cached_content_token_count"),
        )

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

    async def aclose(self) -> None:
        """Close the SDK's HTTP sessions."""
        client, self._client = self._client, None
        if client is not None:
            await client.aio.aclose()
