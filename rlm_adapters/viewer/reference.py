"""Logs of the reference RLM (alexzhang13/rlm, ``rlms`` on PyPI) read as this library's trajectory records.

The reference's ``RLMLogger`` writes JSON Lines: one ``metadata`` record (root model, backend, limits), then
one ``iteration`` record per root turn holding the whole prompt so far, the reply, each code block with what
it printed and the sub-calls it made (``rlm_calls``), and ``final_answer`` once there is one. It records no
root-model tokens and no end-of-run record, so a run whose last iteration has no final answer is shown as
unfinished, and the root's token counts as unknown (zero).

Such a log is as untrusted as any other: a part of the wrong shape is read as missing, and the records this
builds are checked like this library's own by `model.build`.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

REFERENCE_KINDS = frozenset({"metadata", "iteration"})


def is_reference(records: list[dict[str, Any]]) -> bool:
    """Whether `records` (a log's records in file order) come from the reference's logger."""
    kind = records[0].get("type") if records else None
    return isinstance(kind, str) and kind in REFERENCE_KINDS


def _time(record: dict[str, Any], default: float) -> float:
    stamp = record.get("timestamp")
    try:
        return datetime.fromisoformat(stamp).timestamp() if isinstance(stamp, str) else default
    except (ValueError, OverflowError, OSError):
        return default


def _number(value: Any) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok and abs(value) < 2**53 else 0.0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item if isinstance(item, dict) else {} for item in value] if isinstance(value, list) else []


def _text(value: Any) -> str:
    if isinstance(value, str) or value is None:
        return value or ""
    try:
        return json.dumps(value, default=str)
    except (RecursionError, ValueError):
        return f"({type(value).__name__} too deep to show)"


def _texts(value: Any) -> list[str]:
    return [_text(item) for item in value] if isinstance(value, list) else []


def _tokens(call: dict[str, Any]) -> tuple[int, int, float]:
    """Input tokens, output tokens and cost of one reference sub-call."""
    summaries = _dict(_dict(call.get("usage_summary")).get("model_usage_summaries"))
    parts = [part for part in summaries.values() if isinstance(part, dict)]
    return (
        sum(int(max(0.0, _number(p.get("total_input_tokens")))) for p in parts),
        sum(int(max(0.0, _number(p.get("total_output_tokens")))) for p in parts),
        sum(_number(p.get("total_cost")) for p in parts),
    )


def _new_messages(prompt: Any, seen: int) -> tuple[list[dict[str, str]], int]:
    """The messages of a turn's prompt not shown with an earlier turn, and how many there are now."""
    if isinstance(prompt, list):
        fresh = [{"role": _text(m.get("role")), "content": _text(m.get("content"))} for m in _dicts(prompt[seen:])]
        return fresh, len(prompt)
    return [{"role": "user", "content": _text(prompt)}], seen


def convert(records: list[dict[str, Any]], path: Path | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and event records of this library's log format for a reference log's records.

    Args:
        records: The reference log's records in file order.
        path: The log's path (its name becomes the run id).
    """
    meta = next((r for r in records if r.get("type") == "metadata"), {})
    # The reference names its logs rlm_<date>_<time>_<id>.jsonl: the id part is the run's.
    run_id = path.stem.rsplit("_", 1)[-1] if path is not None else "reference"
    start = _time(meta or (records[0] if records else {}), 0.0)
    root_model = _text(meta.get("root_model"))
    header = {
        "type": "header",
        "run_id": run_id,
        "time": start,
        "format": "reference RLM (alexzhang13/rlm)",
        "config": {"root_model": root_model, "sub_models": _texts(meta.get("other_backends"))},
    }
    events: list[dict[str, Any]] = [
        {"type": "event", "kind": "run_start", "run_id": run_id, "depth": 0, "time": start, "root_model": root_model}
    ]
    seen = 0
    final: str | None = None
    now = start
    sub = {"calls": 0, "input_tokens": 0, "output_tokens": 0, "cost": 0.0}
    turns = 0
    for record in records:
        if record.get("type") != "iteration":
            continue
        turns += 1
        number = int(max(0.0, _number(record.get("iteration")))) or turns
        now = _time(record, now)
        sent, seen = _new_messages(record.get("prompt"), seen)
        seen += 1  # the reply becomes part of the next turn's prompt
        base = {"type": "event", "run_id": run_id, "depth": 0, "iteration": number}
        events.append(
            {
                **base,
                "kind": "root_call",
                "reply": _text(record.get("response")),
                "messages_sent": sent,
                "model": root_model,
                "time": now,
                "duration": _number(record.get("iteration_time")),
            }
        )
        for index, block in enumerate(_dicts(record.get("code_blocks"))):
            result = _dict(block.get("result"))
            for order, call in enumerate(_dicts(result.get("rlm_calls"))):
                call_id = f"{number}.{index}.{order}"
                tokens_in, tokens_out, cost = _tokens(call)
                sub = {
                    "calls": sub["calls"] + 1,
                    "input_tokens": sub["input_tokens"] + tokens_in,
                    "output_tokens": sub["output_tokens"] + tokens_out,
                    "cost": sub["cost"] + cost,
                }
                shared = {**base, "call_id": call_id, "time": now, "model": _text(call.get("root_model"))}
                prompt = _text(call.get("prompt"))
                events.append({**shared, "kind": "sub_call_start", "call_kind": "llm_query", "prompt": prompt})
                events.append(
                    {
                        **shared,
                        "kind": "sub_call_end",
                        "response": _text(call.get("response")),
                        "error": None if call.get("error") is None else _text(call.get("error")),
                        "input_tokens": tokens_in,
                        "output_tokens": tokens_out,
                        "cost": cost,
                        "duration": _number(call.get("execution_time")),
                    }
                )
            output = _text(result.get("stdout")) + _text(result.get("stderr"))
            events.append(
                {
                    **base,
                    "kind": "cell",
                    "index": index,
                    "code": _text(block.get("code")),
                    "output": output,
                    "error": None,
                    "time": now,
                    "duration": _number(result.get("execution_time")),
                    "final": result.get("final_answer") is not None,
                }
            )
        if record.get("final_answer") is not None:
            final = _text(record["final_answer"])
    if final is not None:
        root = {"calls": turns, "input_tokens": 0, "output_tokens": 0, "cost": 0.0}
        total = {key: root[key] + sub[key] for key in root}
        events.append(
            {
                "type": "event",
                "kind": "final",
                "run_id": run_id,
                "depth": 0,
                "time": now,
                "response": final,
                "finish_reason": "final",
                "usage": {"total": total, "root": root, "sub": sub},
            }
        )
    return header, events
