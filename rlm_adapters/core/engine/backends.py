"""`Backends`: the models of an `RLM` (a root backend and the sub-models'), checked once, built per run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlm_adapters.core.engine.bridge import run_sync
from rlm_adapters.core.lm import LMClient, backend_names, make_client, owns_client
from rlm_adapters.errors import ConfigurationError


@dataclass(frozen=True)
class RunClients:
    """The model clients of one run: built on its event loop (SDK clients bind to one), closed at its end."""

    root: LMClient
    subs: dict[str, LMClient]  # by model name; the first is `llm_query`'s default
    owned: list[LMClient]  # the ones the engine built, and so closes (never a client the user passed in)


@dataclass(frozen=True)
class Backends:
    """The root model's backend and the sub-models', with their settings (`RLM`'s parameters of these names).

    Building one builds every client once, so that a missing key or model name fails here, not mid-run;
    `root_model_name` and `sub_model_names` come from those clients, which are then closed (each run builds
    its own, on its own event loop).
    """

    backend: str | LMClient
    backend_kwargs: dict[str, Any]
    other_backends: list[str | LMClient]
    other_backend_kwargs: list[dict[str, Any]]
    root_model_name: str = field(init=False)
    sub_model_names: list[str] = field(init=False)

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
        built: list[LMClient] = []
        try:
            names = []
            for backend, kwargs in [(self.backend, self.backend_kwargs), *self._others()]:
                client = make_client(backend, kwargs)
                if owns_client(backend):
                    built.append(client)
                names.append(client.model_name)
        finally:
            _close_unused(built)  # also those built before a later backend's settings were refused
        object.__setattr__(self, "root_model_name", names[0])
        object.__setattr__(self, "sub_model_names", names[1:])

    def _others(self) -> list[tuple[str | LMClient, dict[str, Any]]]:
        return list(zip(self.other_backends, self.other_backend_kwargs, strict=True))

    def build(self) -> RunClients:
        """Fresh clients for one run (a client instance given as a backend is used as it is)."""
        root = make_client(self.backend, self.backend_kwargs)
        owned = [root] if owns_client(self.backend) else []
        subs: dict[str, LMClient] = {}
        for backend, kwargs in self._others():
            client = make_client(backend, kwargs)
            if owns_client(backend):
                owned.append(client)
            subs.setdefault(client.model_name, client)
        return RunClients(root, subs, owned)


# A misbehaving client's aclose must not hang RLM(): its clean-up is given up after this long.
_CLOSE_TIMEOUT = 30.0


def _close_unused(clients: list[LMClient]) -> None:
    """Close clients built only to read their settings, from sync code (``RLM()`` may run inside a loop).

    They never made a call, so no event loop holds their resources; they are closed on a loop of their own.
    Errors from ``aclose`` are ignored: the settings were already read.
    """
    if not clients:
        return

    async def close_all() -> None:
        closes = asyncio.gather(*(client.aclose() for client in clients), return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closes, _CLOSE_TIMEOUT)

    run_sync(close_all())  # inside a running loop (an async caller building an RLM), on a loop of its own
