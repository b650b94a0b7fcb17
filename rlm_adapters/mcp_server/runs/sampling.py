"""The MCP client's own model as the RLM's backend: ``sampling/createMessage``, with no key on the server.

When ``rlm-mcp`` has no model configured (no ``RLM_MODEL``, no ``--model``, none named by the call) and the
client declared the ``sampling`` capability, the root and the sub-calls are sent to the client, which runs
them on its model under its user's account and approval. ``modelPreferences`` ask for intelligence for the
root and for speed and low cost for the sub-calls. Token counts are what the client reports in the result's
``_meta`` (``usage`` with ``inputTokens`` / ``outputTokens``, or the OpenAI or Anthropic spelling); a
client that reports none gets estimates (about four characters a token), and the tool's result says so. Cost
is 0: the client's user pays under their own plan, which the server cannot see.

Sampling needs a connection that lets the server send requests mid-call: the handshake-era protocol
versions (up to 2025-11-25). Protocol 2026-07-28 deprecated sampling and has no such back-channel, so
there the tool answers with the one line saying how to configure a model.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp_types import ModelPreferences, SamplingMessage, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from rlm_adapters.core.adapter_kit import estimate_tokens
from rlm_adapters.core.lm import LMClient, LMResponse, Message, estimated_input, split_system
from rlm_adapters.errors import ConfigurationError, ModelError
from rlm_adapters.model_flags import MODEL_VARIABLES

Role = Literal["root", "sub"]
MAX_TOKENS = 8192
ESTIMATED_NOTE = "the MCP client reported no token counts: these are estimates (about 4 characters a token)"
PREFERENCES: dict[Role, ModelPreferences] = {
    "root": ModelPreferences(intelligence_priority=0.9, speed_priority=0.3, cost_priority=0.3),
    "sub": ModelPreferences(intelligence_priority=0.3, speed_priority=0.8, cost_priority=0.8),
}
NO_MODEL = (
    "no model configured and this MCP client offers no sampling: set {variables} in the server's env "
    "(e.g. claude mcp add rlm --env RLM_MODEL=gpt-5-mini --env OPENAI_API_KEY=... -- rlm-mcp)"
)
MODERN_NO_SAMPLING = (
    "no model configured: set {variables} in the server's env; this client offers sampling, but protocol "
    "{version} lets a server ask for it only before a call, not during a run"
)

_USAGE_SPELLINGS = (
    ("inputTokens", "outputTokens"),
    ("input_tokens", "output_tokens"),
    ("prompt_tokens", "completion_tokens"),
)


def reported_usage(meta: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """Input and output tokens from a sampling result's ``_meta``, when the client reported them."""
    usage = (meta or {}).get("usage")
    if not isinstance(usage, Mapping):
        return None
    for inputs, outputs in _USAGE_SPELLINGS:
        pair = usage.get(inputs), usage.get(outputs)
        if all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in pair):
            return int(pair[0]), int(pair[1])  # type: ignore[arg-type]
    return None


@dataclass
class SamplingUsage:
    """How many calls of a run had their tokens estimated (the client reported none)."""

    estimated_calls: int = 0


@dataclass
class SamplingClient:
    """An `LMClient` whose calls are ``sampling/createMessage`` requests to the connected MCP client.

    Args:
        session: The server session of the tool call (``ctx.session``).
        role: ``root`` (intelligence first) or ``sub`` (speed and cost first).
        request_id: The tool call's request id, so that requests travel with it.
        usage: Shared by a run's clients: counts the calls whose tokens were estimated.
    """

    session: Any
    role: Role
    request_id: Any = None
    usage: SamplingUsage = field(default_factory=SamplingUsage)
    max_tokens: int = MAX_TOKENS

    @property
    def model_name(self) -> str:
        """``mcp-client`` for the root, ``mcp-client-sub`` for sub-calls (the client picks the real model)."""
        return "mcp-client" if self.role == "root" else "mcp-client-sub"

    @property
    def endpoint(self) -> str:
        """One endpoint for root and sub-calls: the engine learns one concurrency limit for the client."""
        return "mcp-client-sampling"

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        """One sampling request; the reply's text and the client's token counts."""
        system, turns = split_system(messages)
        sampling = [
            SamplingMessage(role=m["role"], content=TextContent(type="text", text=m["content"]))  # type: ignore[arg-type]
            for m in turns
        ]
        with warnings.catch_warnings():
            # Deprecated from protocol 2026-07-28 on; this module uses it only on the versions before.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            request = self.session.create_message(
                sampling,
                max_tokens=self.max_tokens,
                system_prompt=system or None,
                model_preferences=PREFERENCES[self.role],
                related_request_id=self.request_id,
            )
        try:
            result = await request
        except MCPError as exc:
            raise ModelError(
                f"the MCP client refused the sampling request ({exc.message}); "
                f"allow sampling for this server in the client, or set {MODEL_VARIABLES}",
                model=self.model_name,
            ) from exc
        content = result.content
        text = content.text if isinstance(content, TextContent) else ""
        counted = reported_usage(result.meta)
        if counted is None:
            self.usage.estimated_calls += 1
            counted = estimated_input(messages), estimate_tokens(text)
        # Accounted under the model the client chose; cost 0: the client's user pays under their own plan.
        name = result.model or self.model_name
        return LMResponse(text=text, input_tokens=counted[0], output_tokens=counted[1], model=name, cost=0.0)

    async def aclose(self) -> None:
        """Nothing to release: the session belongs to the server."""


def sampling_backends(
    ctx: Context,
    *,
    model: str | None,
    configured: str | None,
    environ: Mapping[str, str] | None,
    session: str | None = None,
    background: bool = False,
) -> tuple[dict[str, Any], SamplingUsage] | None:
    """`RLM` backend options that send the run's calls to the client, or None when a model is configured.

    Args:
        ctx: The tool call's context.
        model: The model the call named.
        configured: The server's ``--model``.
        environ: The environment the server reads (``RLM_MODEL``).
        session: The call's persistent session name, if any (not offered with sampling: a session outlives
            the tool call whose request its sampling requests would travel with).
        background: The call starts a background run (refused with sampling for the same reason).

    Raises:
        ConfigurationError: no model is configured and the client cannot sample, or sampling was asked to
            serve a persistent session (one line saying what to set).
    """
    env = os.environ if environ is None else environ
    if model or configured or env.get("RLM_MODEL"):
        return None
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.sampling is None:
        raise ConfigurationError(NO_MODEL.format(variables=MODEL_VARIABLES))
    version = ctx.protocol_version
    if version in MODERN_PROTOCOL_VERSIONS:
        raise ConfigurationError(MODERN_NO_SAMPLING.format(variables=MODEL_VARIABLES, version=version))
    if session is not None:
        raise ConfigurationError(
            f"session={session!r} needs a model configured on the server ({MODEL_VARIABLES}): the client's own "
            "model (sampling) serves single calls only"
        )
    if background:
        raise ConfigurationError(
            f"background=true needs a model configured on the server ({MODEL_VARIABLES}): the client's own "
            "model (sampling) answers only while the call that asks is open"
        )
    usage = SamplingUsage()
    request_id = ctx.request_context.request_id  # as the client sent it (ctx.request_id is its str())
    root: LMClient = SamplingClient(ctx.session, "root", request_id, usage)
    sub: LMClient = SamplingClient(ctx.session, "sub", request_id, usage)
    return {"backend": root, "other_backends": [sub]}, usage
