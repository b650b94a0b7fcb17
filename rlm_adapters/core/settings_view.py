"""`SettingsView`: an `RLM`'s plain attributes, each one field of its frozen `settings` or `backends`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlm_adapters.core.budget import Limits
from rlm_adapters.core.engine.models import Backends
from rlm_adapters.core.engine.parsing import CodeFences
from rlm_adapters.core.lm import LMClient
from rlm_adapters.core.pricing import Price
from rlm_adapters.core.settings import FinalProtocol, RLMSettings, Setting


class SettingsView:
    """``rlm.max_depth`` is ``rlm.settings.max_depth``, ``rlm.backend`` is ``rlm.backends.backend``.

    Setting one replaces the frozen object with a checked copy; a run already going on keeps its own.
    """

    settings: RLMSettings
    backends: Backends

    limits = Setting[Limits]()
    max_depth = Setting[int]()
    max_iterations = Setting[int]()
    max_concurrency = Setting[int]()
    max_concurrent_subcalls = Setting[int | None]()
    max_batch = Setting[int]()
    max_sandboxes = Setting[int]()
    max_output_chars = Setting[int]()
    max_errors = Setting[int | None]()
    max_tokens = Setting[int | None]()
    environment = Setting[str]()
    environment_kwargs = Setting[Mapping[str, Any]]()
    instructions = Setting[str | None]()
    custom_system_prompt = Setting[str | None]()
    final_protocol = Setting[FinalProtocol]()
    code_fences = Setting[CodeFences]()
    compaction = Setting[bool]()
    compaction_threshold_pct = Setting[float]()
    context_window = Setting[int]()
    prices = Setting[Mapping[str, Price]]()
    raise_on_budget = Setting[bool]()
    verbose = Setting[bool]()
    persistent = Setting[bool]()
    backend = Setting[str | LMClient]("backends")
    backend_kwargs = Setting[dict[str, Any]]("backends")
    other_backends = Setting[list[str | LMClient]]("backends")
    other_backend_kwargs = Setting[list[dict[str, Any]]]("backends")
    root_model_name = Setting[str]("backends")
    sub_model_names = Setting[list[str]]("backends")
