"""Moved names: an import the build no longer serves from where the consumer imports it."""

from __future__ import annotations

from compat.errors import CompatError
from compat.fix.context import FixContext, span
from compat.fix.edits import RouteImport
from compat.fix.plan import Claim, FixerPlan, Unhandled
from compat.fix.shim import export, homes, raw_import
from compat.fix.source import imported_as
from fixers import Fixer


class MovedImports(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        root = ctx.root
        for location, pairs in ctx.by_location(ctx.failing("import")).items():
            file, _, line = location.rpartition(":")
            for symbol in sorted({f.symbol for _, f in pairs}):
                module, _, name = symbol.rpartition(".")
                finding = next(f for _, f in pairs if f.symbol == symbol)
                if imported_as(root, file, int(line), name) != name:
                    plan.unhandled.append(Unhandled(finding, f"{name} is not imported as `from {module} import "
                                                             f"{name}` there (an alias or a module import)"))
                    continue
                try:
                    piece = raw_import(ctx, symbol)
                    found = homes(ctx.builds, symbol)
                except CompatError as exc:
                    plan.unhandled.append(Unhandled(finding, str(exc)))
                    continue
                plan.pieces += [piece, export(name)]
                plan.edits.append(RouteImport(file, int(line), f"from {module} import {name}", module=module,
                                              names=(name,), shim=ctx.shim.module))
                # Where the name is missing, its calls fail too: the same cause.
                plan.claims += [Claim("import", symbol), Claim("call", symbol)]
                where = "; ".join(f"{m} ({span([b for b in ctx.builds if b.version in vs])})" for m, vs in found)
                plan.notes.append(f"{name} is imported from where the running build defines it: {where}")
        return plan


FIXER = MovedImports(
    name="imports",
    description="A name the build no longer serves where the consumer imports it: the shim imports it from "
                "wherever the running build defines it (an except-ImportError chain over the audited builds' "
                "homes) and the consumer imports it from the shim.",
    handles=("import",),
    order=10,
)
