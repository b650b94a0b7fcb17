"""`rlm_adapters.core`'s second face: what the adapters, the services and the CLI use beyond what users touch.

`rlm_adapters.core` holds what a user of the engine handles (`RLM`, its results, events, limits, hooks and
types); this face holds the helpers the packages standing on the engine share: running a coroutine or an event
stream from sync code, the options' declarations and defaults, trajectory records, tool-call offers, units and
token estimates. Outside `rlm_adapters.core`, these are the two ways in (`tests/test_layers.py` rule (j)).

Each name loads its module on first use (PEP 562), as the core's face does.
"""

import typing  # a module, not names: the face binds no public name outside `__all__`

from rlm_adapters._lazy import LazyNames as _LazyNames

# Each public name -> the module that defines it (loaded when the name is first used).
_LAZY: dict[str, str | tuple[str, str]] = {
    name: module
    for module, names in {
        "rlm_adapters.core.budget_limits": ("limit_amount",),
        "rlm_adapters.core.cleanup": ("close_shielded",),
        "rlm_adapters.core.engine.bridge": (
            "iter_sync",
            "run_sync",
        ),
        "rlm_adapters.core.engine.observers": ("INTERRUPTED",),
        "rlm_adapters.core.engine.parsing": ("Conversation",),
        "rlm_adapters.core.engine.prompts": ("truncate_output",),
        "rlm_adapters.core.engine.tool_calls": ("offer_tools",),
        "rlm_adapters.core.json_schema": ("MAX_SCHEMA_CHARS",),
        "rlm_adapters.core.pricing": ("unpriced_models",),
        "rlm_adapters.core.result": ("jsonable",),
        "rlm_adapters.core.settings": (
            "CHAT_DIRECT_BELOW_TOKENS",
            "DEFAULTS",
            "Declared",
            "OPTIONS",
            "flagged",
        ),
        "rlm_adapters.core.tally": ("EventTally",),
        "rlm_adapters.core.tokens": ("estimate_tokens", "tokens_for_chars"),
        "rlm_adapters.core.trajectory": (
            "SOURCES_RECORD",
            "append_record",
            "new_run_id",
        ),
        "rlm_adapters.core.units": (
            "human_bytes",
            "parse_size",
        ),
    }.items()
    for name in names
}

if typing.TYPE_CHECKING:
    from rlm_adapters.core.budget_limits import limit_amount
    from rlm_adapters.core.cleanup import close_shielded
    from rlm_adapters.core.engine.bridge import iter_sync, run_sync
    from rlm_adapters.core.engine.observers import INTERRUPTED
    from rlm_adapters.core.engine.parsing import Conversation
    from rlm_adapters.core.engine.prompts import truncate_output
    from rlm_adapters.core.engine.tool_calls import offer_tools
    from rlm_adapters.core.json_schema import MAX_SCHEMA_CHARS
    from rlm_adapters.core.pricing import unpriced_models
    from rlm_adapters.core.result import jsonable
    from rlm_adapters.core.settings import CHAT_DIRECT_BELOW_TOKENS, DEFAULTS, OPTIONS, Declared, flagged
    from rlm_adapters.core.tally import EventTally
    from rlm_adapters.core.tokens import estimate_tokens, tokens_for_chars
    from rlm_adapters.core.trajectory import SOURCES_RECORD, append_record, new_run_id
    from rlm_adapters.core.units import human_bytes, parse_size

__all__ = [
    "CHAT_DIRECT_BELOW_TOKENS",
    "DEFAULTS",
    "INTERRUPTED",
    "MAX_SCHEMA_CHARS",
    "OPTIONS",
    "SOURCES_RECORD",
    "Conversation",
    "Declared",
    "EventTally",
    "append_record",
    "close_shielded",
    "estimate_tokens",
    "flagged",
    "human_bytes",
    "iter_sync",
    "jsonable",
    "limit_amount",
    "new_run_id",
    "offer_tools",
    "parse_size",
    "run_sync",
    "tokens_for_chars",
    "truncate_output",
    "unpriced_models",
]

_NAMES = _LazyNames(__name__, _LAZY, keep=True)
__getattr__ = _NAMES.load
__dir__ = _NAMES.listing
