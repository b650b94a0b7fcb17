"""Azure OpenAI through `openai.AsyncAzureOpenAI`: the deployment name is the model name.

Everything else (retries honouring ``Retry-After``, timeouts, usage, error messages, settings checks) is the
OpenAI client's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rlm_adapters.core.lm.openai_client import CLIENT_KEYS, OpenAIClient
from rlm_adapters.errors import ConfigurationError

if TYPE_CHECKING:
    import openai

AZURE_KEYS = frozenset(
    {"azure_endpoint", "azure_deployment", "api_version", "azure_ad_token", "azure_ad_token_provider", "default_query"}
)


class AzureOpenAIClient(OpenAIClient):
    """An `LMClient` over `openai.AsyncAzureOpenAI`.

    Args:
        model_name: The deployment name (Azure routes by deployment, not by model).
        **kwargs: ``azure_endpoint`` (else ``AZURE_OPENAI_ENDPOINT``), ``api_version`` (else
            ``OPENAI_API_VERSION`` or ``AZURE_OPENAI_API_VERSION``), ``api_key`` (else
            ``AZURE_OPENAI_API_KEY``) or an Entra ID ``azure_ad_token`` / ``azure_ad_token_provider``; the
            OpenAI client's other options and request keywords as for ``backend="openai"``.
    """

    provider = "Azure OpenAI"
    backend = "azure_openai"
    client_keys = CLIENT_KEYS | AZURE_KEYS

    def _check_credentials(self, client_kwargs: dict[str, Any]) -> str | None:
        endpoint: str | None = (
            client_kwargs.get("azure_endpoint")
            or client_kwargs.get("base_url")
            or os.environ.get("AZURE_OPENAI_ENDPOINT")
        )
        if not endpoint:
            raise ConfigurationError(
                "the azure_openai backend needs an endpoint: backend_kwargs={'azure_endpoint': "
                "'https://NAME.openai.azure.com'} or set AZURE_OPENAI_ENDPOINT"
            )
        if not client_kwargs.get("api_version") and os.environ.get("AZURE_OPENAI_API_VERSION"):
            client_kwargs["api_version"] = os.environ["AZURE_OPENAI_API_VERSION"]  # the reference RLM's variable
        if not (client_kwargs.get("api_version") or os.environ.get("OPENAI_API_VERSION")):
            raise ConfigurationError(
                "the azure_openai backend needs an API version: backend_kwargs={'api_version': '2024-10-21'} "
                "or set OPENAI_API_VERSION (or AZURE_OPENAI_API_VERSION)"
            )
        credentials = ("api_key", "azure_ad_token", "azure_ad_token_provider")
        if not any(client_kwargs.get(k) for k in credentials) and not (
            os.environ.get("AZURE_OPENAI_API_KEY") or os.environ.get("AZURE_OPENAI_AD_TOKEN")
        ):
            raise ConfigurationError(
                "no Azure OpenAI credentials: set AZURE_OPENAI_API_KEY, or pass backend_kwargs={'api_key': ...} "
                "or an Entra ID 'azure_ad_token_provider'"
            )
        return endpoint

    @classmethod
    def credentials_problem(cls, settings: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
        if settings.get("api_key"):
            return None
        needed = ("AZURE_OPENAI_ENDPOINT", "OPENAI_API_VERSION", "AZURE_OPENAI_API_KEY")
        missing = [v for v in needed if not environ.get(v)]
        if not missing or (missing == ["AZURE_OPENAI_ENDPOINT"] and settings.get("base_url")):
            return None
        return f"the azure_openai backend needs {', '.join(missing)} (the endpoint may also come from --base-url)"

    def _make_sdk_client(self, kwargs: dict[str, Any]) -> openai.AsyncOpenAI:
        client: openai.AsyncOpenAI = self._openai.AsyncAzureOpenAI(**kwargs)
        return client
