"""A class's ancestors in the build (its method resolution order), so that a probe can tell whether a consumer
class derives from a vLLM class through vLLM's own subclasses of it (``RBLNUnquantizedFusedMoEMethod(
UnquantizedFusedMoEMethod)`` is a ``FusedMoEMethodBase``)."""

from __future__ import annotations

from dataclasses import dataclass

from compat.facts import Fact
from compat.vllm.static import StaticSurface


@dataclass(frozen=True)
class Lineage:
    path: str
    ancestors: tuple[str, ...] = ()
    """The class's method resolution order in the build, the class first; empty when ``path`` is not a class
    of the build."""


def _read(surface: StaticSurface, path: str) -> Lineage:
    found = surface.lookup(path)
    model = surface.class_model(found) if getattr(found, "kind", None) == "class" else None
    if model is None:
        return Lineage(path)
    order, _ = surface.mro(model)
    return Lineage(path, tuple(cls.found.path for cls in order))


FACT = Fact("lineage", _read)
