"""A class's ancestors in the build (its method resolution order), so that a probe can tell whether a consumer
class derives from a vLLM class through vLLM's own subclasses of it (``RBLNUnquantizedFusedMoEMethod(
UnquantizedFusedMoEMethod)`` is a ``FusedMoEMethodBase``)."""

from __future__ import annotations

from dataclasses import dataclass

from compat.facts import Fact
from compat.vllm.definitions import ClassModel
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind


@dataclass(frozen=True)
class Lineage:
    path: str
    ancestors: tuple[str, ...] = ()
    """The class's method resolution order in the build, the class first; empty when ``path`` is not a class
    of the build."""


def class_order(surface: StaticSurface, path: str) -> list[ClassModel] | None:
    """The method resolution order of the build's class ``path`` (the class first); None when it is not one."""
    found = surface.lookup(path)
    model = surface.class_model(found) if isinstance(found, Found) and found.kind == FoundKind.CLASS else None
    return surface.mro(model)[0] if model is not None else None


def _read(surface: StaticSurface, path: str) -> Lineage:
    order = class_order(surface, path)
    return Lineage(path, tuple(cls.found.path for cls in order)) if order else Lineage(path)


FACT = Fact("lineage", _read)
