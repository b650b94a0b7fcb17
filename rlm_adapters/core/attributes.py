"""An `RLM`'s attributes: ``rlm.max_depth`` is ``rlm.settings.max_depth``, ``rlm.backend`` is ``rlm.backends.backend``.

Each attribute reads one field of a frozen object the `RLM` holds; setting it replaces that object with a checked
copy (`Setting`). `SettingsView` has one for every field of `RLMSettings` and of `Backends`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from rlm_adapters.core.engine.backends import Backends
from rlm_adapters.core.lm import LMClient
from rlm_adapters.core.settings import RLMSettings

T = TypeVar("T")


class Setting(Generic[T]):
    """An attribute that is one field of a frozen object its owner holds (``rlm.max_depth`` is
    ``rlm.settings.max_depth``, ``rlm.backend`` is ``rlm.backends.backend``).

    Setting it replaces that object with a copy, checked again; a run already going on keeps the one it
    started with.

    Args:
        holder: The owner's attribute holding the frozen object.
    """

    def __init__(self, holder: str = "settings") -> None:
        self.holder = holder
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> Setting[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...
    def __get__(self, instance: object | None, owner: type) -> Setting[T] | T:
        if instance is None:
            return self
        value: T = getattr(getattr(instance, self.holder), self.name)
        return value

    def __set__(self, instance: object, value: T) -> None:
        held = getattr(instance, self.holder)
        setattr(instance, self.holder, dataclasses.replace(held, **{self.name: value}))


class _Backends:
    """``rlm.backend`` is ``rlm.backends.backend`` (the models are objects, not options)."""

    backends: Backends

    backend = Setting[str | LMClient]("backends")
    backend_kwargs = Setting[dict[str, Any]]("backends")
    other_backends = Setting[list[str | LMClient]]("backends")
    other_backend_kwargs = Setting[list[dict[str, Any]]]("backends")
    root_model_name = Setting[str]("backends")
    sub_model_names = Setting[list[str]]("backends")


if TYPE_CHECKING:
    # Type checkers read ``rlm.max_depth`` as the field's own type; assigning one is the runtime's
    # business (a checked copy of the settings), which they see as read-only.
    class SettingsView(RLMSettings, _Backends):
        """``rlm.max_depth`` is ``rlm.settings.max_depth``; setting one replaces the settings."""

        settings: RLMSettings

else:

    class SettingsView(_Backends):
        """``rlm.max_depth`` is ``rlm.settings.max_depth``, ``rlm.backend`` is ``rlm.backends.backend``.

        Setting one replaces the frozen object with a checked copy; a run already going on keeps its own.
        """

    for _item in dataclasses.fields(RLMSettings):
        _attribute: Setting[Any] = Setting()
        setattr(SettingsView, _item.name, _attribute)
        _attribute.__set_name__(SettingsView, _item.name)
