"""`Backends`: the models of an `RLM` (a root backend and the sub-models'), checked once, built once per run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlm_adapters.core.lm import LMClient, ModelClient, backend_names, make_client, owns_client
from rlm_adapters.errors import ConfigurationError


@dataclass(frozen=True)
class RunClients:
    """The model clients of one run: bound to its event loop at their first call, closed at its end."""

    root: ModelClient
    subs: dict[str, ModelClient]  # by model name; the first is `llm_query`'s default
    owned: list[ModelClient]  # the ones the engine built, and so closes (never a client the user passed in)


@dataclass(frozen=True)
class Backends:
    """The root model's backend and the sub-models', with their settings (`RLM`'s parameters of these names).

    Building one builds every client once, so that a missing key or model name fails here, not mid-run, and
    `root_model_name` and `sub_model_names` come from those clients. They have made no call, so they hold no
    connection and no event loop: the first run takes them as they are (a cold ``rlm ask`` builds its
    clients once), and each later run builds its own (SDK clients bind to the event loop of their first call).
    """

    backend: str | LMClient
    backend_kwargs: dict[str, Any]
    other_backends: list[str | LMClient]
    other_backend_kwargs: list[dict[str, Any]]
    root_model_name: str = field(init=False)
    sub_model_names: list[str] = field(init=False)
    _unused: list[_Made] = field(init=False, default_factory=list, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        backend: str | LMClient,
        backend_kwargs: Mapping[str, Any] | None = None,
        other_backends: Sequence[str | LMClient] | None = None,
        other_backend_kwargs: Sequence[Mapping[str, Any]] | None = None,
    ) -> Backends:
        """`Backends` from `RLM`'s arguments (copied; no `other_backend_kwargs`: one empty dict per backend)."""
        others = list(other_backends or [])
        kwargs = [{} for _ in others] if other_backend_kwargs is None else [dict(k) for k in other_backend_kwargs]
        return cls(backend, dict(backend_kwargs or {}), others, kwargs)

    def __post_init__(self) -> None:
        if len(self.other_backend_kwargs) != len(self.other_backends):
            raise ConfigurationError(
                f"other_backend_kwargs has {len(self.other_backend_kwargs)} entries for "
                f"{len(self.other_backends)} other_backends; give one dict per backend"
            )
        for name in [self.backend, *self.other_backends]:
            if isinstance(name, str) and name not in backend_names():
                raise ConfigurationError(f"unknown backend {name!r}; use one of {backend_names()}")
        first = self._make()
        object.__setattr__(self, "root_model_name", first.root.model_name)
        object.__setattr__(self, "sub_model_names", [c.model_name for c in first.all_subs])
        self._unused.append(first)

    def _make(self) -> _Made:
        root = make_client(self.backend, self.backend_kwargs)
        owned = [root] if owns_client(self.backend) else []
        subs: list[ModelClient] = []
        for backend, kwargs in zip(self.other_backends, self.other_backend_kwargs, strict=True):
            client = make_client(backend, kwargs)
            if owns_client(backend):
                owned.append(client)
            subs.append(client)
        return _Made(root, subs, owned)

    def build(self) -> RunClients:
        """The clients for one run: those built with the settings' check for the first run, fresh ones after
        (a client instance given as a backend is used as it is)."""
        try:
            made = self._unused.pop()  # atomic: two first runs on two threads never share clients
        except IndexError:
            made = self._make()
        subs: dict[str, ModelClient] = {}
        for client in made.all_subs:
            subs.setdefault(client.model_name, client)
        return RunClients(made.root, subs, made.owned)


@dataclass(frozen=True)
class _Made:
    root: ModelClient
    all_subs: list[ModelClient]  # in the order given, names repeated as given
    owned: list[ModelClient]
