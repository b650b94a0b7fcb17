"""`reset_process_state` gives a process back what a fresh interpreter has, after real runs left state behind."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlm_adapters.evals.arms import reference

PROGRAM = """
import asyncio, json, sys, tempfile
from pathlib import Path
from rlm_adapters.core.context import validate_context
from rlm_adapters.core.sandbox import REAPER, SandboxSetup, tempdirs
from rlm_adapters.core.sandbox.local import LocalSandbox
from rlm_adapters.core.sandbox.context_store import CONTEXTS
from rlm_adapters.core.sandbox.subprocess import SubprocessSandbox, bytecode, isolation, spares
from rlm_adapters.testing import reset_process_state

async def no_calls(kind, args):
    return None

async def leave_state_behind(folder):
    setup = SandboxSetup(validate_context("ctx"), no_calls, scratch=Path(folder))
    local = LocalSandbox()
    await local.start(setup)  # never closed: its stream routing stays held
    sandbox = SubprocessSandbox()
    await sandbox.start(setup)
    await sandbox.execute("x = 1", None)
    await sandbox.aclose()  # the reaper runs its half; a spare is kept for the next run
    global CONTEXT_FOLDER
    CONTEXT_FOLDER = (await CONTEXTS.acquire(validate_context("held"))).path.parent  # a lease never released

def state():
    spares.POOL.wait_idle()
    return {
        "stdout_is_the_hosts": sys.stdout is HOST_OUT and sys.stderr is HOST_ERR,
        "reaper_running": REAPER.running,
        "idle_spares": len(spares.POOL.pids()),
        "probes_cached": isolation._proven.cache_info().currsize,
        "bytecode_cached": bytecode._launch_bytecode.cache_info().currsize,
        "context_files": len(CONTEXTS.files()) + CONTEXT_FOLDER.exists(),
        "temp_dirs_swept": len(tempdirs._STATE.swept),
    }

HOST_OUT, HOST_ERR = sys.stdout, sys.stderr
CONTEXT_FOLDER = Path("/nonexistent")
with tempfile.TemporaryDirectory() as folder:
    asyncio.run(leave_state_behind(folder))
    before = state()
    reset_process_state()
    after = state()
print(json.dumps([before, after]), file=sys.__stdout__)
"""


def test_reset_process_state_undoes_what_runs_leave_behind() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    assert before["stdout_is_the_hosts"] is False and before["reaper_running"] is True
    assert before["idle_spares"] >= 1 and before["probes_cached"] >= 1 and before["bytecode_cached"] >= 1
    assert before["context_files"] == 2  # the held file and its folder
    assert before["temp_dirs_swept"] == 1  # the first folder made in the temp dir handed over its sweep
    assert after == {
        "stdout_is_the_hosts": True,
        "reaper_running": False,
        "idle_spares": 0,
        "probes_cached": 0,
        "bytecode_cached": 0,
        "context_files": 0,
        "temp_dirs_swept": 0,
    }


# Each piece of the model layer's and the evals' process-wide state, dirtied the way a run dirties it.
BEYOND_THE_SANDBOXES = """
import json, sys
from rlm_adapters.testing import reset_process_state

reset_process_state()  # in a fresh process: loads nothing of what it would reset
untouched = [m for m in ("rlm_adapters.evals", "rlm_adapters.core.lm.openai_client",
                         "rlm_adapters.core.lm.litellm_client", "rlm_adapters.core.lm.bedrock_client")
             if m in sys.modules]

from rlm_adapters.core import pricing
import httpx
from rlm_adapters.core.lm import _http, bedrock_client, limiter, litellm_client, openai_client
from rlm_adapters.evals import tokens
from rlm_adapters.evals.arms import reference
from rlm_adapters.evals.tasks import oolong_window, sniah

limiter.AdaptiveLimiter(8, endpoint="http://127.0.0.1:1/v1").succeeded()
pricing.register_price("my-model", 1.0, 2.0)
pricing.note_unpriced("unpriced-model", capped=False)
openai_client.shared_ssl_context(), openai_client.request_keys(), _http._stream_class(httpx)
bedrock_client.converse_request_keys()
litellm_client.accepted_keys()
tokens.get_encoding(), sniah.key_words(), oolong_window.load_pool()
reference._registry["rlm-adapters-1:m"] = object()
import rlm.core.rlm as the_reference
original = the_reference.get_client
with reference._route.lock:
    reference._route._patch()

def state():
    return {
        "learnt_limits": len(limiter._learned),
        "registered_prices": len(pricing._registered),
        "unpriced_named": len(pricing._warned),
        "cached": sum(f.cache_info().currsize for f in (
            openai_client.shared_ssl_context, openai_client.request_keys, _http._stream_class,
            bedrock_client.converse_request_keys,
            litellm_client.accepted_keys, tokens.get_encoding, sniah.key_words, oolong_window.load_pool)),
        "reference_clients": len(reference._registry),
        "reference_patched": the_reference.get_client is not original,
    }

before = state()
reset_process_state()
print(json.dumps([untouched, before, state()]))
"""


@pytest.mark.skipif(not reference.available(), reason='needs the reference RLM (pip install -e ".[bench]")')
@pytest.mark.slow
def test_reset_process_state_forgets_the_model_layer_and_the_evals() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BEYOND_THE_SANDBOXES], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    untouched, before, after = json.loads(done.stdout)
    assert untouched == []
    assert before == {
        "learnt_limits": 1,
        "registered_prices": 1,
        "unpriced_named": 1,
        "cached": 8,
        "reference_clients": 1,
        "reference_patched": True,
    }
    assert after == dict.fromkeys(before, 0) | {"reference_patched": False}


REGISTERED_BACKENDS = """
import json, sys
from rlm_adapters.testing import reset_process_state

reset_process_state()  # in a fresh process: does not load the registry to reset it
untouched = "rlm_adapters.core.lm.registry" not in sys.modules

from rlm_adapters import ScriptedModel, register_backend
from rlm_adapters.core.lm import backend_names, make_client
from rlm_adapters.errors import ConfigurationError

register_backend("mine", lambda: ScriptedModel(["FINAL(1)"]))
register_backend("openai", lambda: ScriptedModel(["FINAL(2)"]))  # shadows the built-in name
before = {"mine": "mine" in backend_names(), "openai": type(make_client("openai")).__name__}
reset_process_state()
try:
    make_client("mine")
    refused = ""
except ConfigurationError as exc:
    refused = str(exc)
after = {"mine": "mine" in backend_names(), "openai": "openai" in backend_names(), "refused": refused}
print(json.dumps([untouched, before, after]))
"""


def test_reset_process_state_forgets_registered_backends() -> None:
    done = subprocess.run(
        [sys.executable, "-c", REGISTERED_BACKENDS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    untouched, before, after = json.loads(done.stdout)
    assert untouched is True
    assert before == {"mine": True, "openai": "ScriptedModel"}
    assert after["mine"] is False and after["openai"] is True  # the built-in name stays, its override goes
    assert "unknown backend 'mine'" in after["refused"]
