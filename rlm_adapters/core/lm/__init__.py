"""Model clients behind one async protocol."""

from rlm_adapters.core.lm.base import LMClient, LMResponse, Message
from rlm_adapters.core.lm.limiter import DEFAULT_CEILING
from rlm_adapters.core.lm.registry import backend_names, make_client, owns_client, register_backend
from rlm_adapters.core.lm.scripted import ScriptedModel

__all__ = [
    "DEFAULT_CEILING",
    "LMClient",
    "LMResponse",
    "Message",
    "ScriptedModel",
    "backend_names",
    "make_client",
    "owns_client",
    "register_backend",
]
