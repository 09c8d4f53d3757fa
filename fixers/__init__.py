"""Fixers: each module here turns one kind of finding into shim code and source edits, found through this
registry (as ``probes/`` is).

A fixer module defines ``FIXER``, an instance of ``Fixer`` naming the probes whose findings it handles. Its
``plan(ctx)`` reads the findings of every audited build (``compat.fix.context.FixContext``) and the facts the
probes read, and returns a ``FixerPlan``: pieces of the shim module (feature-detecting code: the shim adapts
to the vLLM it meets by signatures, attributes and module locations, never by version number), LibCST edits
of the consumer's files, and claims on the findings it fixes. Adding a fixer means adding one module here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compat.registry import collect

if TYPE_CHECKING:
    from compat.fix.context import FixContext
    from compat.fix.plan import FixerPlan
    from compat.probe import Probe


@dataclass(frozen=True)
class Fixer:
    name: str
    description: str
    handles: tuple[Probe, ...]
    """The probes whose findings this fixer handles."""
    order: int = 50

    @property
    def checks(self) -> tuple[str, ...]:
        """The names of the probes it handles, as findings name their check."""
        return tuple(probe.name for probe in self.handles)

    def plan(self, ctx: FixContext) -> FixerPlan:
        raise NotImplementedError


def all_fixers() -> list[Fixer]:
    """Every fixer in this package, in registry order (``Fixer.order``, then name)."""
    return collect(__name__, __path__, "FIXER", Fixer)
