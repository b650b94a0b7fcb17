"""The options of a run, each declared once: `RLMSettings` (checked, frozen), `RLMOptions` and `DEFAULTS`.

An option is one field of `RLMSettings` (or of the budget's `Limits`, for the caps) made by `option(...)`:
its name, type, default, documentation and check, and the ``rlm ask`` flag that offers it, if any.
Everything else is derived from those fields: `RLM`'s keyword arguments (`RLMOptions`, for type checkers;
`keyword_parameters`, for `inspect.signature`; the docstring's entries, `options_doc`), `rlm.max_depth`
and the other attributes (`core/attributes.py`), ``rlm ask``'s flags (`flagged`), the keywords `ChatRLM` passes on,
and every default (`DEFAULTS`: ``rlm-mcp``'s configuration and ``rlm serve``'s ceilings read theirs from it).

`RLMOptions` restates each keyword's type (a `TypedDict` is what `**options: Unpack[...]` needs for an IDE
to show ``RLM(max_depth=...)``); `tests/core/test_options.py` holds it equal to the fields.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import textwrap
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict, TypeVar

from rlm_adapters.core.budget_limits import Limits
from rlm_adapters.core.context import PREVIEW_CHARS
from rlm_adapters.core.lm import DEFAULT_CEILING
from rlm_adapters.core.pricing import Price, as_price
from rlm_adapters.core.sandbox import DEFAULT_CELL_TIMEOUT, sandbox_kinds
from rlm_adapters.errors import ConfigurationError

T = TypeVar("T")
# Which final-answer protocol the system prompt teaches (both are always accepted).
FinalProtocol = Literal["FINAL", "answer"]
# Which fenced blocks run: any Python-looking fence, or only ```repl (the reference's rule).
CodeFences = Literal["any", "repl"]
ContextAlias = Literal["latest", "first"]  # what a persistent session's ``context`` names
# A check: the value to keep for `name` (normalised), or a `ConfigurationError` naming the value.
Check = Callable[[str, Any], Any]
OPTION = "rlm_option"  # the key of a field's metadata that holds its `Option`
# One reply's default cap: a reasoning model spends output tokens thinking before it writes (OpenAI suggests
# 25,000 to start with at high effort), while an RLM's visible reply is one cell or one answer.
DEFAULT_MAX_REPLY_TOKENS = 16_384
# ``direct_below_tokens`` where a user swaps a plain chat model for an RLM (`ChatRLM`, ``rlm serve``): a chat
# turn, a short document, a tool result go to the plain model; past about 64,000 characters the RLM answers.
# An eighth of a 128K window, room for the reply in a 32K one; the published runs (docs/python.md, "When to
# use an RLM") see the plain model level with or ahead of an RLM at these sizes, and behind it well past them.
CHAT_DIRECT_BELOW_TOKENS = 16_000


def positive_int(name: str, value: Any, minimum: int) -> int:
    """`value` when it is an integer >= `minimum`; else a `ConfigurationError` naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigurationError(f"{name}={value!r} must be an integer >= {minimum}")
    return value


# -- checks ---------------------------------------------------------------------------------------
def at_least(minimum: int, *, optional: bool = False) -> Check:
    """An integer >= `minimum` (`optional`: or None)."""

    def check(name: str, value: Any) -> Any:
        return value if optional and value is None else positive_int(name, value, minimum)

    return check


def one_of(*choices: str) -> Check:
    """One of these strings."""

    def check(name: str, value: Any) -> Any:
        if value not in choices:
            raise ConfigurationError(f"{name}={value!r} must be {' or '.join(repr(c) for c in choices)}")
        return value

    return check


def seconds(name: str, value: Any) -> Any:
    """A positive number of seconds, or None."""
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool) or not value > 0):
        raise ConfigurationError(f"{name}={value!r} must be a positive number of seconds or None")
    return value


def truth(name: str, value: Any) -> bool:
    """A truth value (kept as a bool)."""
    return bool(value)


def fraction(name: str, value: Any) -> Any:
    """A number in (0, 1]."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 1:
        raise ConfigurationError(f"{name}={value!r} must be in (0, 1]")
    return value


def environment_kind(name: str, value: Any) -> Any:
    """A sandbox kind this process knows."""
    if value not in sandbox_kinds():
        raise ConfigurationError(f"unknown environment {value!r}; use one of {sandbox_kinds()}")
    return value


def option_names(name: str, value: Any) -> dict[str, Any]:
    """A dict of option names (None: empty), copied: a dict the caller changes later changes nothing here."""
    value = {} if value is None else value
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"{name}={value!r} must be a dict of option names")
    return dict(value)


def _price_pair(value: Any) -> bool:
    return (
        isinstance(value, tuple | list)
        and len(value) in (2, 4)
        and all(isinstance(p, int | float) and not isinstance(p, bool) and math.isfinite(p) and p >= 0 for p in value)
    )


def price_table(name: str, value: Any) -> dict[str, Price]:
    """``{model: (in, out[, cache_read, cache_write])}`` (None: empty), checked now: a bad price would only
    fail when a call is priced."""
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name}={value!r} must be a dict {{model: (usd_per_mtok_in, usd_per_mtok_out)}}")
    for model, pair in value.items():
        if not isinstance(model, str) or not _price_pair(pair):
            raise ConfigurationError(
                f"{name}[{model!r}]={pair!r} must be (usd_per_mtok_in, usd_per_mtok_out) or (in, out, cache_read, "
                "cache_write): two or four numbers >= 0"
            )
    return {model: as_price(pair) for model, pair in value.items()}


# -- the declaration ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Flag:
    """How every command offers an option (`rlm_adapters.flags` builds the flags from it): an integer of at
    least `minimum`, a number above 0, or one of `choices` (read from the option's type).

    Attributes:
        name: The flag (``--max-depth``); ``rlm-mcp``'s variable is made from it (``RLM_MAX_DEPTH``).
        help: Its help line.
        minimum: The least an integer option takes.
        choices: The values a choice takes.
        aliases: Older spellings, still accepted.
        off: 0 is accepted and means None (no bound).
        limit: A limit of a run's spend: ``rlm serve`` offers it as a ceiling every run stays under.
    """

    name: str
    help: str
    minimum: int = 0
    choices: Callable[[], list[str]] | None = None
    aliases: tuple[str, ...] = ()
    off: bool = False
    limit: bool = False


@dataclass(frozen=True)
class Option:
    """What an `RLMSettings` field says of itself beyond its name, type and default."""

    doc: str
    check: Check | None = None
    flag: Flag | None = None
    keyword: str | None = None  # `RLM`'s name for it, when not the field's
    aliases: tuple[str, ...] = ()  # older keywords, still accepted (documented; not both at once)


def option(
    default: T,
    doc: str,
    check: Check | None = None,
    *,
    factory: Callable[[], T] | None = None,
    flag: Flag | None = None,
) -> T:
    """One option of a run: an `RLMSettings` field with its documentation, check and interfaces.

    Args:
        default: Its default (ignored with `factory`).
        doc: What it does, as `RLM`'s docstring says it.
        check: Returns the value to keep, or raises `ConfigurationError` naming it.
        factory: Makes a fresh default (for a dict).
        flag: The ``rlm ask`` flag that sets it.
    """
    metadata = {OPTION: Option(doc, check, flag)}
    if factory is not None:
        made: T = field(default_factory=factory, metadata=metadata)
        return made
    declared: T = field(default=default, metadata=metadata)
    return declared


@dataclass(frozen=True, kw_only=True)
class RLMSettings:
    """The options of an `RLM` that are plain values, validated when built (`dataclasses.replace` too).

    The fields carry `RLM`'s keyword names and mean what their docs say (`options_doc`); the token, cost,
    time and sub-call caps are `limits` (a `Limits`). Models, tools, the logger and callbacks are objects,
    not settings, and stay on the `RLM`.
    """

    limits: Limits = field(default_factory=Limits)
    max_depth: int = option(
        1,
        "Recursion depth: 0 disables sub-calls, 1 allows `llm_query`, 2 lets `rlm_query` start nested RLMs.",
        at_least(0),
        flag=Flag("--max-depth", "levels of nested rlm_query", minimum=0, limit=True),
    )
    max_iterations: int = option(
        30,
        "Root turns per run level.",
        at_least(1),
        flag=Flag("--max-iterations", "root model turns", minimum=1, limit=True),
    )
    max_concurrency: int = option(
        DEFAULT_CEILING,
        f"Hard ceiling on calls in flight per model endpoint (default {DEFAULT_CEILING}). Below it the engine "
        "adapts: it starts at 128 (or the ceiling, if lower; or where this process's last run left that endpoint), "
        "grows while calls succeed and backs off when the endpoint answers 429 / 503 or its rate-limit headers "
        "run out.",
        at_least(1),
    )
    max_concurrent_subcalls: int | None = option(
        None,
        "Nested RLMs (``rlm_query_batched``) running at once (None: no bound beyond `max_concurrency`).",
        at_least(1, optional=True),
    )
    max_batch: int = option(
        10_000,
        "The most prompts one ``llm_query_batched`` / ``rlm_query_batched`` call may hold; a longer batch fails "
        "at once with a message naming this limit.",
        at_least(1),
    )
    max_sandboxes: int = option(
        32,
        "Sandboxes that may run at once in one run tree (the top-level run's included); nested runs past it "
        "wait for a free one.",
        at_least(1),
    )
    context_preview_chars: int = option(
        PREVIEW_CHARS,
        "How many characters of the context's beginning the root model is shown before it writes code (0: "
        "none: the root model sees only the context's type, size and shape, never its text unless code prints "
        "it); nested runs' contexts too.",
        at_least(0),
        flag=Flag("--context-preview-chars", "characters of the context the root model is shown first", minimum=0),
    )
    max_output_chars: int = option(10_000, "How much of a block's printed output the root model sees.", at_least(100))
    max_errors: int | None = option(
        None, "End the run after this many turns in a row with a cell error.", at_least(1, optional=True)
    )
    max_tokens: int | None = option(
        None,
        "End the run once all its calls together used more tokens (checked after each turn).",
        at_least(1, optional=True),
    )
    environment: str = option(
        "subprocess",
        'The sandbox kind: ``"subprocess"`` (default), ``"local"`` (trusted code only), ``"docker"``, or a cloud '
        'sandbox: ``"e2b"``, ``"modal"``, ``"prime"``, ``"daytona"``.',
        environment_kind,
        flag=Flag("--sandbox", "sandbox for the model's code", choices=sandbox_kinds, aliases=("--environment",)),
    )
    environment_kwargs: Mapping[str, Any] = option(
        {}, "Sandbox options (``cell_timeout``, ``memory_limit``, ...).", option_names, factory=dict
    )
    cell_timeout: float | None = option(
        None,
        f"Seconds one code cell may compute before it is stopped (None: the sandbox's default, "
        f"{DEFAULT_CELL_TIMEOUT:g} s, or ``environment_kwargs['cell_timeout']``). Time the cell spends waiting on "
        "the host's model calls (``llm_query`` & co.) does not count: the run's own limits govern that. A cell "
        "past it is interrupted first (what it printed and its variables are kept), and killed only if it does "
        "not stop.",
        seconds,
        flag=Flag(
            "--cell-timeout", "seconds one code cell may compute (waiting on model calls does not count)", limit=True
        ),
    )
    max_reply_tokens: int | None = option(
        DEFAULT_MAX_REPLY_TOKENS,
        f"The most tokens one model reply may hold, root turns and sub-calls alike (default "
        f"{DEFAULT_MAX_REPLY_TOKENS:,}: room for a reasoning model's thinking and a cell; lower it for a small "
        "local model's window). Sent in each provider's own field, unless that model's backend_kwargs set one "
        "(``max_tokens``, ``max_completion_tokens``), which wins. A reply cut at it is flagged "
        "(``usage_summary``'s ``truncated_replies``, the trajectory) and the root model is told. None: no cap.",
        at_least(16, optional=True),
        flag=Flag("--max-reply-tokens", "the most tokens one model reply may hold", minimum=16, limit=True),
    )
    direct_below_tokens: int | None = option(
        None,
        "The direct route: a prompt (the context and the question, counted as the engine counts tokens, about "
        "four characters a token) under this many tokens is one plain call to the root model: no sandbox, no "
        "sub-calls, the answer is its reply, streamed as it arrives. The result, the log and every adapter "
        'say which route ran and why (``metadata["route"]``, ``"route_reason"``). A direct prompt the model '
        "refuses as too long falls back to the RLM once. None (`RLM`'s default): always the RLM.",
        at_least(1, optional=True),
        flag=Flag("--direct-below-tokens", "answer prompts under this many tokens with one plain call", minimum=1),
    )
    instructions: str | None = option(None, "Extra instructions added to the root model's system prompt.")
    custom_system_prompt: str | None = option(
        None, "Replaces the whole system prompt (``{custom_tools_section}`` is filled in)."
    )
    final_protocol: FinalProtocol = option(
        "FINAL",
        'What the system prompt teaches for finishing: ``"FINAL"`` (FINAL / FINAL_VAR) or ``"answer"`` (the '
        'reference\'s ``answer["content"] = ...; answer["ready"] = True``). Both are always accepted.',
        one_of("FINAL", "answer"),
    )
    code_fences: CodeFences = option(
        "any",
        'Which fenced blocks run: ``"any"`` (```repl, ```python, bare) or ``"repl"`` (only ```repl, as the reference).',
        one_of("any", "repl"),
    )
    compaction: bool = option(
        False, "Summarise the root's older turns when its history nears its context window.", truth
    )
    compaction_threshold_pct: float = option(0.85, "The fraction of the window at which to compact.", fraction)
    context_window: int = option(128_000, "The root model's window in tokens, for compaction.", at_least(1000))
    prices: Mapping[str, Price] = option(
        {},
        'Extra prices, ``{"model": (usd_per_mtok_in, usd_per_mtok_out)}``, or four numbers with the prompt '
        "cache's read and write prices.",
        price_table,
        factory=dict,
        flag=Flag("--price", "a model's price in US dollars per million input and output tokens (repeatable)"),
    )
    raise_on_budget: bool = option(
        False,
        "Raise instead of returning when a limit ends the run, as the reference RLM does: `TimeoutExceededError`, "
        "`TokenLimitExceededError`, `ErrorThresholdExceededError`, `CancellationError` or `BudgetExceededError`, "
        "each carrying the partial answer and the result.",
    )
    raise_on_error: bool = option(
        True,
        "Raise `RLMRunFailed` (with the result on ``.result``) when a run fails (`RLMResult.failed`): no answer "
        "because a model call, the sandbox or a typed answer failed. False returns that result instead, its "
        "reason in ``result.error``. A run a limit ends returns its partial answer either way.",
        truth,
    )
    verbose: bool = option(False, "Print each iteration to stderr with rich.")
    persistent: bool = option(
        False,
        "Keep one sandbox across `completion` calls: each call's context becomes ``context_1``, ``context_2``, "
        "... and each finished conversation ``history_0``, ... . Close it with `close()`, ``with RLM(...) as "
        "rlm:`` or ``async with``.",
        truth,
    )
    context_alias: ContextAlias = option(
        "latest",
        'In a persistent session, ``context`` / ``history`` name the ``"latest"`` one (ours) or the ``"first"`` '
        "(the reference's).",
        one_of("latest", "first"),
    )
    session_idle_timeout: float | None = option(
        None,
        "A persistent sandbox unused this many seconds is closed (the next call starts a fresh one).",
        seconds,
    )
    session_max_lifetime: float | None = option(
        None, "A persistent sandbox is closed this many seconds after it started.", seconds
    )
    sources_timeout: float | None = option(
        10.0,
        "Seconds a run's observers (its cited sources and claim checks) may work once the answer exists. The "
        "answer never waits longer: what they had not finished by then is left out and named "
        '(``result.sources_note``, ``result.metadata["unfinished"]``). None: no bound.',
        seconds,
        flag=Flag("--sources-timeout", "seconds a run's sources may take once its answer exists, 0 no bound", off=True),
    )

    def __post_init__(self) -> None:
        self.limits.validate()
        for item in dataclasses.fields(self):
            declared = item.metadata.get(OPTION)
            if isinstance(declared, Option) and declared.check is not None:
                # Normalised copies (a dict becomes our own, a truth value a bool): nothing the caller
                # keeps a reference to can change these settings later.
                object.__setattr__(self, item.name, declared.check(item.name, getattr(self, item.name)))
        if self.cell_timeout is not None:
            given = self.environment_kwargs.get("cell_timeout")
            if given is not None and given != self.cell_timeout:
                raise ConfigurationError(
                    f"give cell_timeout={self.cell_timeout!r} or environment_kwargs['cell_timeout']={given!r}, not both"
                )
            # The sandboxes read their options from environment_kwargs: the option is one of them.
            object.__setattr__(
                self, "environment_kwargs", {**self.environment_kwargs, "cell_timeout": self.cell_timeout}
            )


class RLMOptions(TypedDict, total=False):
    """`RLM`'s keyword arguments that are options (`RLMSettings`' fields and `Limits`'), as type checkers see
    them; each means what `options_doc` says. A dict option also takes None (an empty one)."""

    max_depth: int
    max_iterations: int
    max_root_tokens: int
    max_sub_tokens: int
    max_cost: float | None
    run_timeout: float | None
    max_sub_calls: int | None
    max_concurrency: int
    max_concurrent_subcalls: int | None
    max_batch: int
    max_sandboxes: int
    context_preview_chars: int
    max_output_chars: int
    max_errors: int | None
    max_tokens: int | None
    environment: str
    environment_kwargs: Mapping[str, Any] | None
    cell_timeout: float | None
    max_reply_tokens: int | None
    direct_below_tokens: int | None
    instructions: str | None
    custom_system_prompt: str | None
    final_protocol: FinalProtocol
    code_fences: CodeFences
    compaction: bool
    compaction_threshold_pct: float
    context_window: int
    prices: Mapping[str, Price] | None
    raise_on_budget: bool
    raise_on_error: bool
    verbose: bool
    persistent: bool
    context_alias: ContextAlias
    session_idle_timeout: float | None
    session_max_lifetime: float | None
    sources_timeout: float | None
    timeout: float | None  # the older name of `run_timeout`


DEFAULTS = RLMSettings()


@dataclass(frozen=True)
class Declared:
    """One option as the interfaces see it: where it lives, its default and its declaration."""

    name: str  # `RLM`'s keyword (and every interface's)
    field: str  # its field in `RLMSettings`, or in `Limits` (`in_limits`)
    type: str  # as written in its field
    default: Any  # None for a dict option (a fresh empty one)
    option: Option
    in_limits: bool


def declared() -> Iterator[Declared]:
    """Every option, `Limits`' caps first, in declaration order."""
    for item in dataclasses.fields(Limits):
        meta = item.metadata
        cli = Flag(**meta["flag"]) if "flag" in meta else None
        cap = Option(str(meta.get("doc", "")), None, cli, meta.get("keyword"), tuple(meta.get("aliases", ())))
        default = getattr(DEFAULTS.limits, item.name)
        yield Declared(cap.keyword or item.name, item.name, str(item.type), default, cap, True)
    for item in dataclasses.fields(RLMSettings):
        found = item.metadata.get(OPTION)
        if isinstance(found, Option):
            default = None if item.default_factory is not dataclasses.MISSING else item.default
            yield Declared(found.keyword or item.name, item.name, str(item.type), default, found, False)


OPTIONS: dict[str, Declared] = {d.name: d for d in declared()}
# An older keyword still accepted, and the option it names.
ALIASES: dict[str, str] = {alias: d.name for d in OPTIONS.values() for alias in d.option.aliases}


def resolve_aliases(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` with each alias under its option's keyword; the two given at once (neither None) is refused."""
    resolved = {k: v for k, v in options.items() if k not in ALIASES}
    for alias, keyword in ALIASES.items():
        if alias in options and options[alias] is not None:
            if resolved.get(keyword) is not None:
                raise ConfigurationError(
                    f"give {keyword}={resolved[keyword]!r} or {alias}={options[alias]!r}, not both ({alias} is the "
                    f"older name of {keyword})"
                )
            resolved[keyword] = options[alias]
    return resolved


def settings_from(options: Mapping[str, Any], *, caller: str = "RLM()") -> RLMSettings:
    """`RLMSettings` from `RLM`'s keywords, aliases resolved (a cap goes into `limits`); an unknown one is a
    `TypeError` naming it (and the closest known name), as Python's own for a misspelt keyword."""
    options = resolve_aliases(options)
    unknown = [name for name in options if name not in OPTIONS]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], OPTIONS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"{caller} got an unexpected keyword argument {unknown[0]!r}{hint}")
    limits = {OPTIONS[k].field: v for k, v in options.items() if OPTIONS[k].in_limits}
    rest = {OPTIONS[k].field: v for k, v in options.items() if not OPTIONS[k].in_limits}
    return RLMSettings(limits=Limits(**limits), **rest)


def keyword_parameters() -> list[inspect.Parameter]:
    """`RLM`'s option keywords for `inspect.signature` (and ``help(RLM)``), each with its default; then the
    aliases (default None: not given)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    named = [inspect.Parameter(d.name, keyword, default=d.default, annotation=_annotation(d)) for d in OPTIONS.values()]
    aliases = [
        inspect.Parameter(alias, keyword, default=None, annotation=_annotation(OPTIONS[name]))
        for alias, name in ALIASES.items()
    ]
    return [*named, *aliases]


def _annotation(d: Declared) -> str:
    return f"{d.type} | None" if d.option.check in (option_names, price_table) else d.type


def options_doc(indent: str = "        ") -> str:
    """The options' entries of a Google-style ``Args:`` section, in declaration order."""
    entries = [(d.name, d.option.doc) for d in OPTIONS.values()]
    entries += [(alias, f"The older name of `{name}` (still accepted; not both).") for alias, name in ALIASES.items()]
    return "\n".join(
        textwrap.fill(f"{name}: {doc}", 110, initial_indent=indent, subsequent_indent=indent + "    ")
        for name, doc in entries
    )


def field_name(keyword: str) -> str:
    """The `RLMSettings` (or `Limits`) field of an `RLM` keyword or alias."""
    return OPTIONS[ALIASES.get(keyword, keyword)].field


def flagged() -> list[Declared]:
    """The options every command offers as flags (`rlm_adapters.flags` builds them), `Limits`' caps first."""
    return [d for d in OPTIONS.values() if d.option.flag is not None]
