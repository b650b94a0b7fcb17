"""`Backends` checks each backend by building its client once, and closes what it built for that."""

from __future__ import annotations

import asyncio
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


def test_clients_built_to_check_the_settings_are_closed() -> None:
    backends = Backends.of("counted", {"model": "root"}, ["counted", "counted"], [{"model": "a"}, {"model": "b"}])
    assert (backends.root_model_name, backends.sub_model_names) == ("root", ["a", "b"])
    assert (Counted.made, Counted.closed) == (3, 3)


def test_closed_when_built_inside_a_running_loop() -> None:
    async def build() -> Backends:
        return Backends.of("counted", other_backends=["counted"])

    asyncio.run(build())
    assert (Counted.made, Counted.closed) == (2, 2)


def test_closed_when_a_later_backend_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="refused"):
        Backends.of("counted", other_backends=["counted"], other_backend_kwargs=[{"refuse": True}])
    assert (Counted.made, Counted.closed) == (1, 1)


def test_a_client_the_user_passed_is_not_closed() -> None:
    mine: Any = Counted("mine")
    backends = Backends.of(mine, other_backends=["counted"])
    assert backends.root_model_name == "mine"
    assert (Counted.made, Counted.closed) == (2, 1)  # only the one Backends built
    run = backends.build()
    assert run.root is mine and run.owned == [run.subs["counted"]]


def test_a_hanging_close_does_not_hang_the_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlm_adapters.core.engine import backends as models

    async def hang(self: Counted) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(Counted, "aclose", hang)
    monkeypatch.setattr(models, "_CLOSE_TIMEOUT", 0.01)
    assert Backends.of("counted").root_model_name == "counted"
