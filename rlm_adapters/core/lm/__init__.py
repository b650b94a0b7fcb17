"""Model clients behind one async protocol.

This is the model layer's face: the engine (`rlm_adapters.core`) imports only the names below, never a
module of the layer (a test holds it to that). Clients of optional SDKs are reached by backend name
through `make_client`, so importing this face loads none of them.
"""

from rlm_adapters.core.lm._reply import checked_response
from rlm_adapters.core.lm.base import LMClient, LMResponse, Message
from rlm_adapters.core.lm.deadline import DeadlineExceeded
from rlm_adapters.core.lm.identity import client_identity
from rlm_adapters.core.lm.limiter import DEFAULT_CEILING, AdaptiveLimiter, run_call
from rlm_adapters.core.lm.registry import backend_names, make_client, owns_client, register_backend
from rlm_adapters.core.lm.scripted import ScriptedModel

__all__ = [
    "DEFAULT_CEILING",
    "AdaptiveLimiter",
    "DeadlineExceeded",
    "LMClient",
    "LMResponse",
    "Message",
    "ScriptedModel",
    "backend_names",
    "checked_response",
    "client_identity",
    "make_client",
    "owns_client",
    "register_backend",
    "run_call",
]
