"""The arms `rlm eval` compares, every one driven with the same `ModelSetup` (the same clients and settings).

- ``direct`` and ``compaction``: the paper's base model and summary agent (`arms.baselines`).
- ``rlm`` (depth 1), ``rlm-depth0`` (no sub-calls) and ``rlm-depth2`` (nested RLMs): this package's engine
  (`arms.engine`).
- ``rlms``: the reference RLM (PyPI ``rlms``) with the same clients and budget, when installed
  (`arms.reference`).
"""

from __future__ import annotations

import time

from rlm_adapters.errors import is_context_limit
from rlm_adapters.evals.arms.base import ARM_NAMES, ArmName, ArmOutcome, ModelSetup, Status
from rlm_adapters.evals.arms.baselines import part_tokens, run_compaction, run_direct, split_parts
from rlm_adapters.evals.arms.engine import RLM_DEPTHS, run_rlm
from rlm_adapters.evals.arms.reference import require_reference, restore_reference, run_rlms
from rlm_adapters.evals.tasks.base import Instance


async def run_arm(arm: ArmName, setup: ModelSetup, instance: Instance, repeat: int = 0) -> ArmOutcome:
    """Run `arm` on `instance` (its `repeat`-th sample, for ``--repeats``) and time it."""
    if arm == "rlms":
        return await run_rlms(setup, instance)  # times itself: reference runs wait for one another
    started = time.perf_counter()
    if arm == "direct":
        outcome = await run_direct(setup, instance, repeat)
    elif arm == "compaction":
        outcome = await run_compaction(setup, instance, repeat)
    elif arm == "routed":
        outcome = await run_rlm(setup, instance, RLM_DEPTHS["rlm"], repeat, routed=True)
    else:
        outcome = await run_rlm(setup, instance, RLM_DEPTHS[arm], repeat)
    outcome.seconds = time.perf_counter() - started
    return outcome


def parse_arms(text: str) -> list[ArmName]:
    """Parse ``direct,rlm`` into arm names.

    Raises:
        ValueError: naming an unknown arm and the known ones.
        ConfigurationError: naming the package, for ``rlms`` when the reference is not installed.
    """
    arms: list[ArmName] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = next((name for name in ARM_NAMES if name == part), None)
        if match is None:
            raise ValueError(f"unknown arm {part!r}; use one of {', '.join(ARM_NAMES)}")
        if match == "rlms":
            require_reference()
        if match not in arms:
            arms.append(match)
    if not arms:
        raise ValueError("no arm given; use one or more of " + ", ".join(ARM_NAMES))
    return arms


__all__ = [
    "ARM_NAMES",
    "RLM_DEPTHS",
    "ArmName",
    "ArmOutcome",
    "ModelSetup",
    "Status",
    "is_context_limit",
    "parse_arms",
    "part_tokens",
    "restore_reference",
    "run_arm",
    "run_compaction",
    "run_direct",
    "run_rlm",
    "run_rlms",
    "split_parts",
]
