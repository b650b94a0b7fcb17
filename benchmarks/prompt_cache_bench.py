"""Input cost of a 20-iteration run with and without Anthropic prompt caching.

Run it with ``python -m benchmarks.prompt_cache_bench``.

Each root turn of an RLM re-sends the whole history: the system prompt, the context's description, every
earlier reply and every earlier cell's output. With caching on, the Anthropic client marks the system
prompt and the history's stable prefix (`core/lm/_caching.py`), so turn N reads turns 1..N-1 from the
cache at 0.1x the input price and writes only what is new at 1.25x. The model is the local Anthropic wire
fake (`rlm_adapters.testing.FakeAnthropicServer`), which bills as Anthropic does (a prefix is read only
if an earlier request wrote it; nothing under the 1,024-token minimum is cached) and is reached through
the real `anthropic` SDK. Each turn's cell prints about `--output-chars` characters (the root sees them,
cut at the engine's 10,000); the price is claude-sonnet-4-5's list price ($3 per million input tokens).
"""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from rlm_adapters import RLM
from rlm_adapters.testing import FakeAnthropicServer

MODEL = "claude-sonnet-4-5"
INPUT_PRICE = 3.0  # USD per million input tokens


def script(iterations: int, output_chars: int) -> list[str]:
    """`iterations` turns that each print a finding of about `output_chars` characters, then FINAL."""
    repeat = max(1, output_chars // 60)
    turns = [
        f"```repl\nfinding_{i} = context[{i * 97}:{i * 97 + 60}]\nprint('step {i}:', finding_{i} * {repeat})\n```"
        for i in range(iterations - 1)
    ]
    return [*turns, "FINAL(done)"]


def run_once(iterations: int, output_chars: int, caching: bool) -> dict[str, Any]:
    """One run of the script; the fake's bill and the engine's own accounting of it."""
    with FakeAnthropicServer(root=script(iterations, output_chars)) as server:
        rlm = RLM(
            backend="anthropic",
            backend_kwargs={
                "model_name": MODEL,
                "base_url": server.url,
                "api_key": "bench",
                "max_retries": 0,
                "max_tokens": 1024,
                "prompt_caching": caching,
            },
            environment="local",
            max_depth=0,
            max_iterations=iterations,
        )
        context = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(20_000))
        result = rlm.completion(context, "What does the log say?")
        bill = server.cache.bill
    root = result.usage_summary.root
    assert result.finish_reason == "final", result.error
    return {
        "caching": caching,
        "iterations": result.iterations,
        "root_calls": root.calls,
        "input_tokens": root.input_tokens,
        "cache_read_tokens": root.cache_read_tokens,
        "cache_write_tokens": root.cache_write_tokens,
        "input_cost": bill.input_cost(INPUT_PRICE),
        "engine_input_cost": result.cost - root.output_tokens * 15.0 / 1e6,
    }


def measure(iterations: int = 20, output_chars: int = 1500) -> dict[str, Any]:
    """The same run with caching off and on, and the ratio of their input costs."""
    off = run_once(iterations, output_chars, caching=False)
    on = run_once(iterations, output_chars, caching=True)
    return {"off": off, "on": on, "ratio": on["input_cost"] / off["input_cost"]}


def main(argv: list[str] | None = None) -> int:
    """Print both runs and the saving."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=20, help="root turns (default 20)")
    parser.add_argument("--output-chars", type=int, default=1500, help="characters each cell prints (default 1500)")
    args = parser.parse_args(argv)
    # The SDK warns that claude-sonnet-4-5 is to be retired; the price is still its list price.
    warnings.filterwarnings("ignore", category=DeprecationWarning, message="The model")
    row = measure(args.iterations, args.output_chars)
    for name in ("off", "on"):
        run = row[name]
        print(
            f"caching {name:>3}: {run['root_calls']} root calls, {run['input_tokens']:,} input tokens "
            f"({run['cache_read_tokens']:,} read from the cache, {run['cache_write_tokens']:,} written), "
            f"input cost ${run['input_cost']:.4f} (engine's count ${run['engine_input_cost']:.4f})"
        )
    print(f"input cost with caching: {row['ratio']:.2f}x of without ({1 - row['ratio']:.0%} saved)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
