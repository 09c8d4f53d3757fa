"""A package of plug-in modules (``probes/``, ``fixers/``): each module defines one value under a known name."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import Protocol, TypeVar


class Registered(Protocol):
    """What a plug-in value has for the registry's order."""

    @property
    def order(self) -> int: ...

    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Registered)


def collect(package: str, path: Iterable[str], attribute: str, kind: type[T]) -> list[T]:
    """The ``attribute`` of every module of ``package`` (not those named ``_*``) that is a ``kind``, in
    registry order: ``order``, then ``name``."""
    found: list[T] = []
    for info in pkgutil.iter_modules(path):
        if info.name.startswith("_"):
            continue
        value = getattr(importlib.import_module(f"{package}.{info.name}"), attribute, None)
        if isinstance(value, kind):
            found.append(value)
    return sorted(found, key=lambda v: (v.order, v.name))
