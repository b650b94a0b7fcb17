"""The RLM arms: this package's engine over the whole context, at depth 0, 1 or 2; and ``routed``, the RLM of
depth 1 with the direct route on (``direct_below_tokens``), so one run shows where the RLM pays."""

from __future__ import annotations

from rlm_adapters.core import RLM
from rlm_adapters.core.adapter_kit import CHAT_DIRECT_BELOW_TOKENS
from rlm_adapters.errors import RLMError
from rlm_adapters.evals.arms.base import ArmOutcome, ModelSetup, Status
from rlm_adapters.evals.tasks.base import Instance

RLM_DEPTHS: dict[str, int] = {"rlm": 1, "rlm-depth0": 0, "rlm-depth2": 2}
ARM_OF_DEPTH = {depth: arm for arm, depth in RLM_DEPTHS.items()}
# ``routed`` answers directly below this share of the model's window (``--context-window``; unknown: ChatRLM's
# default, which is this share of a 128K window): room for the reply, and below the lengths where the paper and
# the reproductions see a plain model fall behind an RLM.
ROUTED_WINDOW_SHARE = 8


def routed_threshold(setup: ModelSetup) -> int:
    """The ``routed`` arm's ``direct_below_tokens``."""
    if setup.context_window is None:
        return CHAT_DIRECT_BELOW_TOKENS
    return max(1, setup.context_window // ROUTED_WINDOW_SHARE)


async def run_rlm(
    setup: ModelSetup, instance: Instance, depth: int, repeat: int = 0, *, routed: bool = False
) -> ArmOutcome:
    """An RLM of `depth` over the context, built from the shared clients (`routed`: the ``routed`` arm)."""
    rlm = RLM(
        backend=setup.root,
        other_backends=[setup.sub] if setup.sub else [],
        environment=setup.environment,
        max_depth=depth,
        cache=setup.cache_for("routed" if routed else ARM_OF_DEPTH[depth], instance, repeat),
        direct_below_tokens=routed_threshold(setup) if routed else None,
        raise_on_error=False,  # a failed run is scored as an error with what it spent
        **setup.rlm_kwargs,
    )
    try:
        result = await rlm.acompletion(instance.context, instance.question)
    except RLMError as exc:
        return ArmOutcome(answer="", status="error", error=str(exc))
    total = result.usage_summary.total
    finish = result.finish_reason
    # The arms offer no tools, so a run never ends with calls of them.
    status: Status = "ok" if finish == "final" else "error" if finish == "tool_calls" else finish
    return ArmOutcome(
        answer=result.response,
        status=status,
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        cost=result.cost + result.metadata.get("replayed_cost", 0.0),  # what it cost when paid
        calls=total.calls,
        error=result.error,
        extra={
            "iterations": result.iterations,
            "sub_calls": result.metadata.get("sub_calls", 0),
            "depth_reached": result.metadata.get("depth_reached", 0),
            "cached_calls": total.cached_calls,
            "route": result.metadata.get("route", "rlm"),
        },
    )
