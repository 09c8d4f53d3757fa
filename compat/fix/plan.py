"""What a fixer contributes: code for the shim module, edits of the consumer's files, and the findings it
claims to fix (the re-audit of the patched consumer must not show any of them again)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from compat.findings import Finding
    from compat.fix.edits import Edit


@dataclass(frozen=True)
class ShimPiece:
    """A block of the shim module: definitions the patched consumer uses, and why they are there."""

    key: str
    """Identity: two fixers asking for the same piece get one copy."""
    code: str
    why: str
    imports: tuple[str, ...] = ()
    """Import lines the code needs at the top of the shim (``import inspect``)."""
    weight: int = 1
    """Of two pieces with one key the heavier wins (a wrapper over a plain export of the same name)."""
    wraps: str = ""
    """For an adjustment of a wrapped callable: its name. The code then defines ``_adjust_<name>_<fixer>(
    target, params, args, kwargs, context) -> (args, kwargs)``, and the shim exports ``name`` as a wrapper that
    applies every fixer's adjustment in turn and calls the running build's callable."""
    context: tuple[str, ...] = ()
    """Keywords the call site hands the wrapper for an adjustment (objects beside the call, such as
    ``model_config``); the wrapper keeps them for the adjustments unless the build's callable takes them."""


@dataclass(frozen=True)
class Claim:
    """Findings a fixer fixes: its check and a pattern on their symbol (``fnmatch``)."""

    check: str
    symbol: str = "*"

    def covers(self, finding: Finding) -> bool:
        return finding.check == self.check and fnmatch.fnmatchcase(finding.symbol, self.symbol)


@dataclass(frozen=True)
class Unhandled:
    """A finding a fixer looked at and cannot fix, with the reason (listed in the fix report)."""

    finding: Finding
    reason: str


@dataclass
class FixerPlan:
    """Everything one fixer wants done; empty when it has nothing to fix."""

    fixer: str
    pieces: list[ShimPiece] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the fixer did and why, one line each (shown in the report and in the shim's docstring)."""
    unhandled: list[Unhandled] = field(default_factory=list)
    accepted: list[tuple[Claim, str]] = field(default_factory=list)
    """Findings the fixer leaves as they are on purpose, with why they do not matter for the consumer."""

    @property
    def empty(self) -> bool:
        return not (self.pieces or self.edits or self.claims or self.unhandled or self.accepted)
