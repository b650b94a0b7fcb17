"""Whole RLM runs at each sandbox level the break-out suite attacks (bubblewrap system / bundled, unshare, docker)."""

from __future__ import annotations

from typing import Any

import pytest

from rlm_adapters.core.sandbox.subprocess import sandbox as subprocess_sandbox
from tests.security.conftest import DOCKER_OPTIONS, docker_skip_reason, level_param, level_reach

# Each level but the quick one (`QUICK_LEVEL`) runs in `pytest -m slow`.
RUN_LEVELS = [
    level_param("bwrap-system"),
    level_param("bwrap-bundled"),
    level_param("unshare"),
    level_param("docker", pytest.mark.docker),
]


def environment_at(kind: str, monkeypatch: pytest.MonkeyPatch, **limits: Any) -> dict[str, Any]:
    """`RLM` keyword arguments whose sandbox runs at `kind` (skips when this machine lacks it).

    A subprocess level is pinned to this very launcher (``isolation="bwrap"`` would take the system's first).
    """
    if kind == "docker":
        if reason := docker_skip_reason():
            pytest.skip(reason)
        return {"environment": "docker", "environment_kwargs": {**DOCKER_OPTIONS, **limits}}
    reach = level_reach(kind)
    monkeypatch.setattr(subprocess_sandbox, "detect_level", lambda request, python: reach)
    return {"environment": "subprocess", "environment_kwargs": {"isolation": reach.level, **limits}}
