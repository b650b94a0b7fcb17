"""`rlm serve`: an OpenAI-compatible Chat Completions endpoint whose model is an RLM over the conversation.

`build_app(ServeConfig([...]))` is the ASGI app (Starlette); ``rlm serve`` runs it with uvicorn. A served
model (`ServedModel`, or `parse_model` of a ``--model`` value) maps a name to a root model, a sub-model and
the limits of its runs; `Ceilings` bound every run. See docs/serve.md.
"""

from __future__ import annotations

from rlm_adapters._extras import require

require("starlette", extra="serve", feature="rlm serve")
require("uvicorn", extra="serve", feature="rlm serve")

from rlm_adapters.serve.app import ServeConfig, build_app  # noqa: E402
from rlm_adapters.serve.errors import OpenAIError  # noqa: E402
from rlm_adapters.serve.request import ChatRequest, parse_request  # noqa: E402
from rlm_adapters.serve.served_models import Ceilings, ServedModel, default_model, parse_model  # noqa: E402

__all__ = [
    "Ceilings",
    "ChatRequest",
    "OpenAIError",
    "ServeConfig",
    "ServedModel",
    "build_app",
    "default_model",
    "parse_model",
    "parse_request",
]
