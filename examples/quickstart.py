"""Getting started: the seeds' call, against any OpenAI-compatible endpoint.

export OPENAI_API_KEY=...            # or OPENAI_BASE_URL=http://localhost:8000/v1 for a local server
export RLM_MODEL=gpt-5-mini          # optional; RLM_SUB_MODEL=gpt-5-nano for cheaper sub-calls
python examples/quickstart.py
"""

from __future__ import annotations

import os
import random

from rlm_adapters import RLM, RLMLogger


def make_log(lines: int = 200_000, seed: int = 0) -> str:
    """A synthetic service log, far longer than most context windows (about 9 MB)."""
    rng = random.Random(seed)
    users = [f"user{n:03d}" for n in range(300)]
    weights = [1 / (rank + 1) for rank in range(len(users))]  # a few users are very active
    levels = ["INFO"] * 8 + ["WARN"] + ["ERROR"]
    chosen = rng.choices(users, weights, k=lines)
    return "\n".join(
        f"2026-11-{1 + n % 28:02d} {rng.choice(levels)} {user} request {rng.randrange(10**6)} done"
        for n, user in enumerate(chosen)
    )


def main() -> None:
    model = os.environ.get("RLM_MODEL", "gpt-5-mini")
    sub_model = os.environ.get("RLM_SUB_MODEL", model)
    rlm = RLM(
        backend="openai",
        backend_kwargs={"model_name": model},
        other_backends=["openai"],
        other_backend_kwargs=[{"model_name": sub_model}],
        environment="subprocess",
        max_depth=1,
        logger=RLMLogger(log_dir="./logs"),
        verbose=False,
    )
    result = rlm.completion(make_log(), root_prompt="Which three user ids appear most often, with their counts?")
    print(result.response)
    print("finish reason:", result.finish_reason)
    print("usage:", result.usage_summary.to_dict())
    print("trajectory:", result.trajectory_file)


if __name__ == "__main__":
    main()
