"""What the fixer tables share: a fix context made from a hand-written consumer (package ``pkg``) and two or more
hand-written vLLM-shaped builds of a range, each audited by the probe the fixer handles (``audit``) or given the
findings a table names (``given``, for checks whose probes read an engine's worth of vLLM); the fixer's plan; and
the consumer's files as compat's own LibCST edits leave them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from compat.audit.pipeline import run_probes
from compat.findings import Evidence, Finding, Status
from compat.fix.context import AuditedBuild, FixContext, Shim
from compat.fix.pipeline import edit_files
from compat.fix.plan import FixerPlan
from compat.probe import Probe, ProbeContext

from ..conftest import Trees

SHIM = Shim("pkg._vllm_compat", "pkg/_vllm_compat.py")


def finding(check: str, symbol: str, location: str | None, status: Status = Status.BROKEN, message: str = "",
            evidence: Evidence | None = None) -> Finding:
    """A finding as a probe gives it (for ``given``)."""
    return Finding(check, status, symbol, location, None, message or f"{check} {symbol}", evidence or Evidence())


@dataclass
class Fixing:
    trees: Trees

    def context(self, consumer: dict[str, str], builds: dict[str, dict[str, str]], probe: Probe | None = None,
                written_for: dict[str, str] | None = None, given: dict[str, list[Finding]] | None = None,
                fixers: tuple[str, ...] = ()) -> FixContext:
        """``consumer`` under ``pkg/`` (an ``__init__.py`` is added); ``builds`` by version, oldest first; each
        build's findings are ``probe``'s audit of it (written for ``written_for``) plus what ``given`` names."""
        scan = self.trees.consumer({"pkg/__init__.py": "", **consumer})
        then = self.trees.vllm(written_for) if written_for is not None else None
        audited = []
        for version, files in builds.items():
            surface = self.trees.vllm(files, version)
            found = run_probes(ProbeContext(scan, surface, then), [probe]) if probe is not None else []
            audited.append(AuditedBuild(version, surface, tuple(found) + tuple((given or {}).get(version, ()))))
        return FixContext(scan, tuple(audited), SHIM, fixers)

    @staticmethod
    def edited(ctx: FixContext, plan: FixerPlan) -> dict[str, str]:
        """Each consumer file the plan edits, as compat's LibCST edits leave it (the shim left out)."""
        return {rel: new for rel, (old, new) in edit_files(ctx.root, ctx, [plan]).items() if rel != ctx.shim.path}

    @staticmethod
    def shim(ctx: FixContext, plan: FixerPlan) -> str:
        return edit_files(ctx.root, ctx, [plan]).get(ctx.shim.path, ("", ""))[1]


@pytest.fixture
def fixing(trees) -> Fixing:
    return Fixing(trees)


def reasons(plan: FixerPlan) -> list[str]:
    return [u.reason for u in plan.unhandled]


def covers(plan: FixerPlan, f: Finding) -> bool:
    return any(c.covers(f) for c in plan.claims)
