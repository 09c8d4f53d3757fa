"""Fixers: each module here turns one kind of finding into shim code and source edits, found through this
registry (as ``probes/`` is).

A fixer module defines ``FIXER``, an instance of ``Fixer`` naming the checks whose findings it handles. Its
``plan(ctx)`` reads the findings of every audited build (``compat.fix.context.FixContext``) and the facts the
probes read, and returns a ``FixerPlan``: pieces of the shim module (feature-detecting code: the shim adapts
to the vLLM it meets by signatures, attributes and module locations, never by version number), LibCST edits
of the consumer's files, and claims on the findings it fixes. Adding a fixer means adding one module here.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compat.fix.context import FixContext
    from compat.fix.plan import FixerPlan


@dataclass(frozen=True)
class Fixer:
    name: str
    description: str
    handles: tuple[str, ...]
    """The checks (probe names) whose findings this fixer handles."""
    order: int = 50

    def plan(self, ctx: FixContext) -> FixerPlan:
        raise NotImplementedError


def all_fixers() -> list[Fixer]:
    """Every fixer in this package, in registry order (``Fixer.order``, then name)."""
    found: list[Fixer] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        fixer = getattr(module, "FIXER", None)
        if isinstance(fixer, Fixer):
            found.append(fixer)
    return sorted(found, key=lambda f: (f.order, f.name))
