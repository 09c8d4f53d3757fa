"""Import resolution: the name exists where the consumer imports it from; if it moved, where to."""

from __future__ import annotations

from dataclasses import replace

from compat.consumer.result import Kind, TouchPoint
from compat.findings import Evidence, Finding, Status
from compat.probe import ConsumerDefined, Probe, ProbeContext
from compat.vllm.surface import Found, FoundKind, Missing, Unresolved, relocated


class ImportProbe(Probe):
    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        if tp.note:
            return self.finding(tp, Status.UNKNOWN, tp.note)
        found = ctx.lookup(tp.symbol)
        before = ctx.lookup(tp.symbol, ctx.written_for) if ctx.written_for else None
        evidence = Evidence(written_for=ctx.where(before), audited=ctx.where(found),
                            written_for_build=ctx.written_for.build.version if ctx.written_for else None)
        if isinstance(found, ConsumerDefined):
            return self.finding(tp, Status.OK, f"{tp.symbol} imports: {found.reason}", None, evidence)
        if isinstance(found, Found):
            elsewhere = found.path != tp.symbol and found.kind != FoundKind.EXTERNAL
            where = f" (defined in {found.path})" if elsewhere else ""
            return self.finding(tp, Status.OK, f"{tp.symbol} imports{where}", ctx.where(found), evidence)
        if isinstance(found, Unresolved):
            status = Status.ERROR if found.traceback else Status.UNKNOWN
            ev = Evidence(evidence.written_for, evidence.audited, evidence.written_for_build,
                          traceback=found.traceback)
            return self.finding(tp, status, f"cannot tell whether {tp.symbol} imports: {found.reason}", None, ev)
        return self._missing(ctx, tp, found, evidence)

    def _missing(self, ctx: ProbeContext, tp: TouchPoint, found: Missing, evidence: Evidence) -> Finding:
        module, _, name = tp.symbol.rpartition(".")
        evidence = replace(evidence, extra=(("missing", found.reason),))
        moved = relocated(ctx.surface, tp.symbol)
        if tp.fallback is not None:
            return self.finding(
                tp, Status.OK,
                f"optional import: {tp.symbol} is not in this build ({found.reason}); the except ImportError "
                f"fallback at {tp.fallback.location} is taken", None, evidence)
        if moved:
            new_module = moved[0].rpartition(".")[0]
            where_now = ctx.where(ctx.lookup(moved[0]))
            message = f"{tp.symbol} is no longer importable from {module}; it now lives in {moved[0]}"
            if len(moved) > 1:
                message += f" (also defined in {', '.join(moved[1:3])})"
            return self.finding(tp, Status.BROKEN, message, where_now,
                                replace(evidence, audited=where_now),
                                fix=f"from {new_module} import {name}")
        return self.finding(tp, Status.BROKEN, f"{tp.symbol} does not exist in this build: {found.reason}", None,
                            evidence, fix=f"remove the use of {name} or find its replacement in this vLLM")


PROBE = ImportProbe(
    name="import",
    description="Every vLLM name the consumer imports exists where it is imported from; a moved name is "
                "reported with its new module.",
    kinds=(Kind.IMPORT,),
    order=10,
)
