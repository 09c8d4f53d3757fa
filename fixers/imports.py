"""Moved names: an import the build no longer serves from where the consumer imports it.

Every import of a moved name is routed, not only the one the audit reports: the audit folds the other
imports of the same name into the first finding ("later uses fail for the same reason"), and each of them
fails the same way. An import inside ``try`` whose ``except ImportError`` supplies the name is the consumer's
own fallback and stays as it is (unless the audit reports it).
"""

from __future__ import annotations

import compat.probes.calls as calls_probe
import compat.probes.imports as imports_probe

from compat.consumer.result import Kind
from compat.errors import CompatError
from compat.findings import Finding
from compat.fix.context import FixContext, span
from compat.fix.edits import RouteImport
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, Unhandled
from compat.fix.shim import export, homes, raw_import
from compat.fix.source import imported_as


def _location(finding: Finding) -> tuple[str, int]:
    file, _, line = (finding.consumer_location or "").rpartition(":")
    return file, int(line or 0)


def import_sites(ctx: FixContext, symbol: str, reported: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Where the consumer imports ``symbol``: the reported places and every other import of it without a
    fallback of its own, in file and line order."""
    others = [(tp.location.file, tp.location.line) for tp in ctx.scan.touchpoints
              if tp.kind == Kind.IMPORT and tp.symbol == symbol and tp.fallback is None]
    return sorted(set(reported) | set(others))


class MovedImports(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(imports_probe.PROBE)
        for symbol in sorted({f.symbol for _, f in failing}):
            findings = list({f.consumer_location: f for _, f in failing if f.symbol == symbol}.values())
            module, _, name = symbol.rpartition(".")
            try:
                piece = raw_import(ctx, symbol)
                found = homes(ctx.builds, symbol)
            except CompatError as exc:
                plan.unhandled += [Unhandled(f, str(exc)) for f in findings]
                continue
            reported = {_location(f): f for f in findings}
            routed = []
            for file, line in import_sites(ctx, symbol, list(reported)):
                if imported_as(ctx.root, file, line, name) != name:
                    if (file, line) in reported:
                        plan.unhandled.append(Unhandled(reported[(file, line)], (
                            f"{name} is not imported as `from {module} import {name}` there (an alias or a module "
                            "import)")))
                    continue
                routed.append(RouteImport(file, line, f"from {module} import {name}", module=module, names=(name,),
                                          shim=ctx.shim.module))
            if not routed:
                continue
            plan.edits += routed
            plan.pieces += [piece, export(name)]
            # Where the name is missing, its calls fail too: the same cause.
            plan.claims += [Claim(imports_probe.PROBE.name, symbol), Claim(calls_probe.PROBE.name, symbol)]
            where = "; ".join(f"{m} ({span([b for b in ctx.builds if b.version in vs])})" for m, vs in found)
            sites = f" ({len(routed)} imports)" if len(routed) > 1 else ""
            plan.notes.append(f"{name} is imported from where the running build defines it{sites}: {where}")
        return plan


FIXER = MovedImports(
    name="imports",
    description="A name the build no longer serves where the consumer imports it: the shim imports it from "
                "wherever the running build defines it (an except-ImportError chain over the audited builds' "
                "homes) and the consumer imports it from the shim.",
    handles=(imports_probe.PROBE,),
    order=10,
)
