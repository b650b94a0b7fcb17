"""Runs every (arm, instance) pair of an evaluation, resumably.

Each finished pair is appended as one JSON line to ``results.jsonl`` in the output folder and flushed at
once, so an interrupted run loses at most the pairs in flight; a rerun with the same settings skips the
pairs already recorded. A record's key covers every setting that changes a result: the arm (so the RLM
depth), the instance (id and content digest), the models (root, sub-, compaction), the context window and
compaction threshold, the sandbox kind, the RLM settings and the harness version; a changed setting is a new
record. With ``--repeats K`` each (arm, instance) runs K times, each a record of its own (``repeat`` 0 to K-1,
the first keyed as a run without repeats is), and each a new sample: its model calls are cached in a scope of
their own, so a rerun replays them and a repeat never replays another's.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlm_adapters.evals.arms import ArmName, ModelSetup, run_arm
from rlm_adapters.evals.tasks.base import Instance, Task

RESULTS_FILE = "results.jsonl"
MAX_TEXT = 4000
Record = dict[str, Any]
OnRecord = Callable[[Record], None]
# Bumped whenever a generator, prompt or scorer changes what a stored result means.
HARNESS_VERSION = "2"
# Records of version 2 name the generators and scorers they were made with; only the originals' remain, and
# their names stay in the key so that results recorded before the others were removed still resume.
ORIGINALS = {"protocol": "paper", "scoring": "paper"}


@dataclass
class EvalPlan:
    """What to run.

    Attributes:
        lengths: Target lengths in tokens.
        n: Instances per length.
        arms: The arms, each run on every instance.
        seed: The generators' seed.
        out: The output folder (``results.jsonl`` and the reports).
        concurrency: (arm, instance) pairs in flight at once.
        repeats: How many times each (arm, instance) runs, each a new sample.
    """

    lengths: Sequence[int]
    n: int
    arms: Sequence[ArmName]
    seed: int
    out: Path
    concurrency: int = 4
    repeats: int = 1


def run_settings(setup: ModelSetup) -> dict[str, Any]:
    """Every setting besides the arm and the instance that changes a result."""
    return {**setup.settings(), **ORIGINALS, "harness": HARNESS_VERSION}


def record_key(arm: str, instance: Instance, settings: dict[str, Any], repeat: int = 0) -> str:
    """The identity of one result: arm, instance (id and content digest), a digest of the settings, and which
    repeat it is (the first has the key a run without repeats gives it, so earlier results still count)."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    again = f"|repeat {repeat}" if repeat else ""
    return f"{arm}|{instance.id}|{instance.digest()[:16]}|{settings.get('model')}|{digest}{again}"


def load_records(path: Path) -> list[Record]:
    """The records of a results file; a torn last line (an interrupted write) is skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").split("\n"):  # JSON leaves U+2028 raw: only "\n" ends a line
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as source:
        if source.seek(0, 2) == 0:
            return True
        source.seek(-1, 2)
        return source.read(1) == b"\n"


def _clip(value: Any) -> Any:
    text = json.dumps(value)
    return value if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... [+{len(text) - MAX_TEXT} chars]"


def generate_all(task: Task, plan: EvalPlan) -> list[Instance]:
    """Every instance of the plan, length by length."""
    return [instance for length in plan.lengths for instance in task.generate(length, plan.n, plan.seed)]


async def run_eval(
    task: Task,
    setup: ModelSetup,
    plan: EvalPlan,
    *,
    instances: Sequence[Instance] | None = None,
    on_record: OnRecord | None = None,
    on_start: Callable[[int, int], None] | None = None,
) -> list[Record]:
    """Run the plan and return its records (earlier runs' records included, in plan order).

    Args:
        task: The task family (generates and scores).
        setup: The shared model configuration.
        plan: Lengths, instances per length, arms, seed, output folder.
        instances: Pre-generated instances (default: generated from the plan).
        on_record: Called with each new record as it is written.
        on_start: Called once with (pairs already done, pairs in total) before running.
    """
    plan.out.mkdir(parents=True, exist_ok=True)
    path = plan.out / RESULTS_FILE
    model = setup.root.model_name
    settings = run_settings(setup)
    done = {record["key"]: record for record in load_records(path) if "key" in record}
    items = list(instances) if instances is not None else generate_all(task, plan)
    pairs = [(arm, item, repeat) for item in items for repeat in range(plan.repeats) for arm in plan.arms]
    todo = [(arm, item, repeat) for arm, item, repeat in pairs if record_key(arm, item, settings, repeat) not in done]
    if on_start is not None:
        on_start(len(pairs) - len(todo), len(pairs))
    semaphore = asyncio.Semaphore(plan.concurrency)

    with path.open("a", encoding="utf-8") as sink:
        if not _ends_with_newline(path):
            sink.write("\n")  # end a line torn by an interruption, so the next record starts clean

        async def one(arm: ArmName, item: Instance, repeat: int) -> None:
            async with semaphore:
                if failed:
                    return
                try:
                    outcome = await run_arm(arm, setup, item, repeat)
                except BaseException:
                    failed.append(True)
                    raise
            # Only a finished answer is scored; a context-limit or error scores 0 (RLM partial answers
            # after a budget or iteration stop are scored, as the run's best answer).
            score = 0.0 if outcome.status in ("context_limit", "error") else task.score(outcome.answer, item)
            record: Record = {
                "key": record_key(arm, item, settings, repeat),
                "task": item.task,
                "arm": arm,
                "model": model,
                "sub_model": setup.sub.model_name if setup.sub else None,
                "instance": item.id,
                "length": item.length,
                "kind": item.kind,
                "seed": plan.seed,
                "repeat": repeat,
                "score": score,
                "status": outcome.status,
                "question": item.question[:MAX_TEXT],
                "answer": outcome.answer[:MAX_TEXT],
                "gold": _clip(item.gold),
                "input_tokens": outcome.input_tokens,
                "output_tokens": outcome.output_tokens,
                "cost": outcome.cost,
                "calls": outcome.calls,
                "seconds": round(outcome.seconds, 3),
                "error": outcome.error,
                "extra": outcome.extra,
                "settings": settings,
                "finished_at": time.time(),
            }
            # No await between write and flush: concurrent tasks never interleave a line.
            sink.write(json.dumps(record) + "\n")
            sink.flush()
            done[record["key"]] = record
            if on_record is not None:
                try:
                    on_record(record)
                except BaseException:
                    failed.append(True)
                    raise

        # On the first failure no further pair starts (the flag), and the running ones are cancelled
        # (the task group); the first error is re-raised as itself, not wrapped in a group.
        failed: list[bool] = []
        try:
            async with asyncio.TaskGroup() as group:
                for arm, item, repeat in todo:
                    group.create_task(one(arm, item, repeat))
        except BaseExceptionGroup as errors:
            raise errors.exceptions[0] from None
    keys = (record_key(arm, item, settings, repeat) for arm, item, repeat in pairs)
    return [done[key] for key in keys if key in done]
