"""Model clients behind one async protocol.

This is the model layer's face: the engine (`rlm_adapters.core`) imports only the names below, never a
module of the layer (a test holds it to that). Clients of optional SDKs are reached by backend name
through `make_client`, so importing this face loads none of them.
"""

import typing  # a module, not names: the face binds no public name outside `__all__`

from rlm_adapters._lazy import LazyNames as _LazyNames
from rlm_adapters.core.lm._common import estimated_input, split_system
from rlm_adapters.core.lm._reply import checked_response
from rlm_adapters.core.lm.base import LMClient, LMResponse, Message, ModelClient, declared
from rlm_adapters.core.lm.call_context import CallProgress, call_scope
from rlm_adapters.core.lm.deadline import DeadlineExceeded
from rlm_adapters.core.lm.limiter import DEFAULT_CEILING, AdaptiveLimiter, run_call
from rlm_adapters.core.lm.redaction import redact
from rlm_adapters.core.lm.registry import (
    backend_names,
    credentials_problem,
    make_client,
    owns_client,
    register_backend,
)
from rlm_adapters.core.lm.reply_identity import client_identity, public_endpoint
from rlm_adapters.core.lm.scripted import ScriptedModel

if typing.TYPE_CHECKING:
    from rlm_adapters.core.lm.langchain_client import chat_model_name
    from rlm_adapters.core.lm.llama_index_client import LlamaIndexClient

# The clients of an adapter's own framework, loaded when that adapter first asks (their SDKs are extras).
_LAZY: dict[str, str | tuple[str, str]] = {
    "LlamaIndexClient": ("rlm_adapters.core.lm.llama_index_client", "LlamaIndexClient"),
    "chat_model_name": ("rlm_adapters.core.lm.langchain_client", "chat_model_name"),
}

__all__ = [
    "DEFAULT_CEILING",
    "AdaptiveLimiter",
    "CallProgress",
    "DeadlineExceeded",
    "LMClient",
    "LMResponse",
    "LlamaIndexClient",
    "Message",
    "ModelClient",
    "ScriptedModel",
    "backend_names",
    "call_scope",
    "chat_model_name",
    "checked_response",
    "client_identity",
    "credentials_problem",
    "declared",
    "estimated_input",
    "make_client",
    "owns_client",
    "public_endpoint",
    "redact",
    "register_backend",
    "run_call",
    "split_system",
]

_NAMES = _LazyNames(__name__, _LAZY, keep=False)
__getattr__ = _NAMES.load
__dir__ = _NAMES.listing
