"""`Backends` checks each backend by building its client once, and the first run uses those clients (issue 49
item 3, issue 53): a cold run builds each client once."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import pytest

from rlm_adapters.core.engine.backends import Backends
from rlm_adapters.core.lm import registry
from rlm_adapters.core.lm.base import LMResponse, Message
from rlm_adapters.errors import ConfigurationError


class Counted:
    """A model client that counts how many of its kind were made and closed."""

    made = 0
    closed = 0

    def __init__(self, model: str = "counted", refuse: bool = False) -> None:
        if refuse:
            raise ConfigurationError("refused")
        Counted.made += 1
        self._model = model

    @property
    def model_name(self) -> str:
        return self._model

    async def acomplete(self, messages: list[Message]) -> LMResponse:
        raise AssertionError("Backends must not call the model")

    async def aclose(self) -> None:
        await asyncio.sleep(0)  # a real close awaits something
        Counted.closed += 1


@pytest.fixture(autouse=True)
def counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Counted, "made", 0)
    monkeypatch.setattr(Counted, "closed", 0)
    monkeypatch.setitem(registry._REGISTERED, "counted", Counted)


def test_the_clients_built_to_check_the_settings_serve_the_first_run() -> None:
    backends = Backends.of("counted", {"model": "root"}, ["counted", "counted"], [{"model": "a"}, {"model": "b"}])
    assert (backends.root_model_name, backends.sub_model_names) == ("root", ["a", "b"])
    assert (Counted.made, Counted.closed) == (3, 0)  # built, never called: they hold nothing to close
    first = backends.build()
    assert Counted.made == 3
    assert (first.root.model_name, list(first.subs)) == ("root", ["a", "b"])
    second = backends.build()  # a later run (maybe on another event loop) gets clients of its own
    assert Counted.made == 6
    assert second.root is not first.root


def test_two_first_runs_on_two_threads_never_share_clients() -> None:
    backends = Backends.of("counted")
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        roots = list(pool.map(lambda _: backends.build().root, range(8)))
    assert len({id(root) for root in roots}) == 8
    assert Counted.made == 8  # one checked in Backends.of, seven more


def test_a_refused_backend_fails_the_constructor() -> None:
    with pytest.raises(ConfigurationError, match="refused"):
        Backends.of("counted", other_backends=["counted"], other_backend_kwargs=[{"refuse": True}])


def test_a_client_the_user_passed_is_used_and_not_closed_by_the_engine() -> None:
    mine: Any = Counted("mine")
    backends = Backends.of(mine, other_backends=["counted"])
    assert backends.root_model_name == "mine"
    run = backends.build()
    assert run.root.implementation is mine and run.owned == [run.subs["counted"]]
    assert backends.build().root.implementation is mine
