"""What a fixer is, and the registry of them: the modules of ``compat.fixers`` (``fixers/`` in the repository),
each defining ``FIXER``. The class lives here, in a module the type checker reads, rather than in the plug-in
package, which a checkout loads under its installed name (``compat.checkout``)."""

from __future__ import annotations

import importlib
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
    """Every fixer of ``compat.fixers``, in registry order (``Fixer.order``, then name)."""
    package = importlib.import_module("compat.fixers")
    return collect(package.__name__, package.__path__, "FIXER", Fixer)
