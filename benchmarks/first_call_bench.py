"""How long a first call holds the host's event loop: ``python -m benchmarks.first_call_bench [--reps N]``.

A server (``rlm-mcp``, ``rlm serve``) runs every client's calls on one event loop, so a first call that
imports a provider's SDK on that loop freezes every other client for the length of the import (issue 41:
``daytona`` 6.7 s, ``anthropic`` 2.5 s). Each case runs in a fresh interpreter, as a server's first call would:
the `RLM` is built in a thread (as ``rlm-mcp`` builds it), then one run goes from the first root call to its
answer, while a heartbeat task ticks every 2 ms on the same loop. Reported per case, median of `--reps`:

- ``first_call_s``: the run's wall time, the SDK's import included;
- ``import_s``: ``import <sdk>`` alone in a fresh interpreter, minus ``python -c pass`` (what could freeze);
- ``max_lag_ms``: the heartbeat's worst delay (the longest the loop was held at once);
- ``held_ms``: the sum of every delay over 20 ms (how long other clients stood still in total).

Backends run against the fake servers of `rlm_adapters.testing` (their real SDKs on the wire). Sandboxes run a
scripted root: ``subprocess`` for real, ``daytona`` and ``prime`` through the SDK fakes of
``tests/core/sandbox/cloud/fakes.py`` (the SDK itself is imported by our code, as in production), ``e2b`` and
``modal`` with their real SDKs against a closed port on 127.0.0.1 (the run fails once the SDK is up; what is
measured is the loop until then). ``--json`` writes the rows.

``--imports [--reps N]`` measures instead what the engine's own import adds to a first call (issue 41: goal
under 0.1 s): ``python -X importtime`` of a first ``completion()`` through the OpenAI backend (default sandbox)
against a fake server, and of the async OpenAI SDK sending the same first request straight through. Each
module's smallest self time over the `--reps` runs of each is kept (so the machine's load drops out); reported:
the modules the engine's run loads beyond the SDK's, ours (``rlm_adapters.*``) apart, and the largest of them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TICK = 0.002
HELD = 0.020
DEAD_URL = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused at once

# case -> the SDK module its first call imports
CASES: dict[str, str] = {
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google.genai",
    "bedrock": "boto3",
    "litellm": "litellm",
    "subprocess": "",
    "docker": "docker",
    "e2b": "e2b",
    "modal": "modal",
    "prime": "prime_sandboxes",
    "daytona": "daytona",
}
ROOT_REPLIES = ["```repl\nprint(len(context))\n```", "FINAL(done)"]


_last_beat = [0.0]


async def _heartbeat(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        started = _last_beat[0] = time.perf_counter()
        await asyncio.sleep(TICK)
        lags.append(time.perf_counter() - started - TICK)


def _watch(loop_thread: int, stop: threading.Event, seen: collections.Counter[str]) -> None:
    """While the heartbeat is late, sample where the loop's thread is (the first frames of ours)."""
    while not stop.wait(0.005):
        if time.perf_counter() - _last_beat[0] < HELD:
            continue
        frame = sys._current_frames().get(loop_thread)
        ours = [f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno}"] if frame is not None else []
        while frame is not None:
            name = frame.f_code.co_filename
            if "rlm_adapters" in name or "benchmarks" in name:
                ours.append(f"{Path(name).name}:{frame.f_lineno} {frame.f_code.co_name}")
            frame = frame.f_back
        seen[" < ".join(ours[:4])] += 1


def _backend_rlm(case: str, url: str) -> Any:
    from rlm_adapters import RLM

    settings: dict[str, Any] = {
        "openai": {"model_name": "gpt-5-mini", "base_url": url + "/v1", "api_key": "k"},
        "anthropic": {"model_name": "claude-haiku-4-5", "base_url": url, "api_key": "k"},
        "gemini": {"model_name": "gemini-2.5-flash", "base_url": url, "api_key": "k"},
        "bedrock": {
            "model_name": "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            "region_name": "us-east-1",
            "aws_access_key_id": "AKIDEXAMPLE",
            "aws_secret_access_key": "not-a-secret",
            "endpoint_url": url,
        },
        "litellm": {"model_name": "openai/gpt-5-mini", "api_base": url + "/v1", "api_key": "k"},
    }[case]
    return RLM(backend=case, backend_kwargs=settings, environment="local")


def _server(case: str) -> Any:
    from rlm_adapters import testing

    kind = {"anthropic": "FakeAnthropicServer", "gemini": "FakeGeminiServer", "bedrock": "FakeBedrockServer"}
    return getattr(testing, kind.get(case, "FakeOpenAIServer"))(root=ROOT_REPLIES)


def _sandbox_options(case: str, folder: Path) -> dict[str, Any]:
    if case in ("daytona", "prime"):
        from tests.core.sandbox.cloud.fakes import FakeAsyncDaytona, FakePrimeClient, Service, simulated_launcher

        service = Service(folder, simulated_launcher(0.0, case == "daytona"))
        return {"client": (FakeAsyncDaytona if case == "daytona" else FakePrimeClient)(service)}
    if case == "e2b":
        os.environ["E2B_API_URL"] = DEAD_URL
        return {"api_key": "e2b_bench", "sandbox_timeout": 60}
    if case == "modal":
        os.environ["MODAL_SERVER_URL"] = DEAD_URL
        return {"token_id": "ak-bench", "token_secret": "as-bench"}
    return {}


async def _first_call(case: str, folder: Path) -> dict[str, Any]:
    from rlm_adapters import RLM, ScriptedModel

    server = _server(case).start() if case in ("openai", "anthropic", "gemini", "bedrock", "litellm") else None
    stop = asyncio.Event()
    lags: list[float] = []
    beat = asyncio.create_task(_heartbeat(stop, lags))
    watching, seen = threading.Event(), collections.Counter[str]()
    if os.environ.get("FIRST_CALL_DEBUG"):  # name what holds the loop, on stderr
        threading.Thread(target=_watch, args=(threading.get_ident(), watching, seen), daemon=True).start()
    await asyncio.sleep(TICK * 5)
    started = time.perf_counter()
    error = None
    try:
        if server is not None:
            rlm = await asyncio.to_thread(_backend_rlm, case, server.url)
        else:
            root = ScriptedModel(list(ROOT_REPLIES))
            rlm = await asyncio.to_thread(
                lambda: RLM(backend=root, environment=case, environment_kwargs=_sandbox_options(case, folder))
            )
        # Modal retries a refused connection for a minute: its SDK is loaded long before.
        async with asyncio.timeout(15 if case == "modal" else 120):
            result = await rlm.acompletion("a context " * 10, "how long?")
        if result.finish_reason != "final":
            error = f"{result.finish_reason}: {(result.error or '')[:120]}"
    except Exception as exc:  # e2b / modal end here, by design: the port is closed
        error = f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        seconds = time.perf_counter() - started
        stop.set()
        await beat
        watching.set()
        for where, count in seen.most_common(12):
            print(f"{count * 5:>6} ms  {where}", file=sys.stderr)
        if server is not None:
            server.stop()
    return {
        "case": case,
        "first_call_s": round(seconds, 3),
        "max_lag_ms": round(max(lags, default=0.0) * 1000, 1),
        "held_ms": round(sum(lag for lag in lags if lag > HELD) * 1000, 1),
        "error": error,
    }


def _child(case: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        return asyncio.run(_first_call(case, Path(folder)))


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def _import_seconds(module: str) -> float:
    def timed(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=_env(), check=True, capture_output=True)
        return time.perf_counter() - started

    return timed(f"import {module}") - timed("pass") if module else 0.0


def measure(case: str, reps: int) -> dict[str, Any]:
    """Median of `reps` fresh interpreters running the first call of `case` (and its SDK's import)."""
    rows = []
    imports = []
    for _ in range(reps):
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.first_call_bench", "--child", case],
            env=_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            return {"case": case, "error": done.stderr.strip().splitlines()[-1:] or ["failed"]}
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        imports.append(_import_seconds(CASES[case]))
    row: dict[str, Any] = {"case": case, "sdk": CASES[case] or "-", "import_s": round(statistics.median(imports), 3)}
    for key in ("first_call_s", "max_lag_ms", "held_ms"):
        row[key] = statistics.median(r[key] for r in rows)
    row["error"] = rows[-1]["error"]
    return row


ENGINE_FIRST_CALL = """
import os
from rlm_adapters import RLM
url = os.environ["RLM_BENCH_URL"]
rlm = RLM(backend="openai", backend_kwargs={"model_name": "gpt-5-mini", "base_url": url + "/v1", "api_key": "k"})
assert rlm.completion("a context " * 10, "how long?").response == "done"
"""
SDK_FIRST_CALL = """
import asyncio, os
import openai
async def main():
    client = openai.AsyncOpenAI(base_url=os.environ["RLM_BENCH_URL"] + "/v1", api_key="k")
    reply = await client.chat.completions.create(model="gpt-5-mini", messages=[{"role": "user", "content": "hi"}])
    await client.close()
    return reply
asyncio.run(main())
"""


def _self_times(code: str, url: str) -> dict[str, int]:
    """Each module's self time in microseconds (``-X importtime``) in a fresh interpreter running `code`."""
    env = {**_env(), "RLM_BENCH_URL": url}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    times: dict[str, int] = {}
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and not line.endswith("imported package"):
            fields = line[len("import time:") :].split("|")
            if fields[0].strip().isdigit():
                times[fields[2].strip()] = int(fields[0])
    return times


def engine_imports(reps: int, top: int = 25) -> dict[str, Any]:
    """What the engine's first call imports beyond the SDK's own first request (see the module's text)."""
    from rlm_adapters.testing import FakeOpenAIServer

    server = FakeOpenAIServer(root=ROOT_REPLIES).start()
    try:
        ours: dict[str, list[int]] = collections.defaultdict(list)
        sdk: set[str] = set()
        for _ in range(reps):  # alternating, so that a change of load hits both alike
            for name, micros in _self_times(ENGINE_FIRST_CALL, server.url).items():
                ours[name].append(micros)
            sdk.update(_self_times(SDK_FIRST_CALL, server.url))
    finally:
        server.stop()
    extra = {name: min(times) for name, times in ours.items() if name not in sdk}
    engine = {name: ms for name, ms in extra.items() if name.split(".")[0] == "rlm_adapters"}
    return {
        "modules": len(extra),
        "ms": round(sum(extra.values()) / 1000, 1),
        "ours_modules": len(engine),
        "ours_ms": round(sum(engine.values()) / 1000, 1),
        "largest": [(name, round(ms / 1000, 1)) for name, ms in sorted(extra.items(), key=lambda x: -x[1])[:top]],
    }


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return not module or importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--imports", action="store_true", help="what the engine's import adds to a first call")
    args = parser.parse_args(argv)
    if args.imports:
        found = engine_imports(args.reps)
        print(
            f"beyond the SDK's first request: {found['modules']} modules, {found['ms']:.1f} ms; "
            f"ours (rlm_adapters.*): {found['ours_modules']} modules, {found['ours_ms']:.1f} ms"
        )
        for name, ms in found["largest"]:
            print(f"{ms:>7.1f} ms  {name}")
        if args.json:
            args.json.write_text(json.dumps(found, indent=2))
        return 0
    if args.child:
        print(json.dumps(_child(args.child)))
        return 0
    rows = []
    print(f"{'case':<11} {'sdk':<16} {'import s':>9} {'first call s':>13} {'max lag ms':>11} {'held ms':>9}  note")
    for case in args.cases.split(","):
        if not _installed(CASES[case]):
            print(f"{case:<11} skipped: {CASES[case]} is not installed")
            continue
        row = measure(case, args.reps)
        rows.append(row)
        if "first_call_s" not in row:
            print(f"{case:<11} failed: {row['error']}")
            continue
        print(
            f"{case:<11} {row['sdk']:<16} {row['import_s']:>9.2f} {row['first_call_s']:>13.2f} "
            f"{row['max_lag_ms']:>11.1f} {row['held_ms']:>9.1f}  {row['error'] or ''}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
