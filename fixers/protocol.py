"""The two-phase execution protocol: ``execute_model`` may return None, and ``sample_tokens`` must follow."""

from __future__ import annotations

import compat.probes.protocol as protocol_probe

from compat.consumer.result import Kind, TouchPoint
from compat.fix.context import FixContext, span
from compat.fix.edits import RouteCall
from compat.fix.fixer import Fixer
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled

CODE = '''
def execute_model(executor, scheduler_output, *args, **kwargs):
    """``executor.execute_model(...)``, completed by ``sample_tokens(None)`` when it returns None (a two-phase
    build: the next ``execute_model`` fails unless ``sample_tokens`` ran). Returns the step's output."""
    output = executor.execute_model(scheduler_output, *args, **kwargs)
    if output is None and hasattr(executor, "sample_tokens"):
        output = executor.sample_tokens(None)
    return output
'''


def _execute_model_call(ctx: FixContext, location: str) -> TouchPoint | None:
    """The call of ``execute_model`` the scan saw at ``location`` (another attribute may be read on its line)."""
    return next((tp for tp in ctx.scan.touchpoints if str(tp.location) == location and tp.kind == Kind.ATTRIBUTE
                 and tp.attribute == "execute_model" and tp.call is not None), None)


def _route(tp: TouchPoint, function: str) -> RouteCall | str:
    """The edit that routes the call through the shim's ``function``, or why the call cannot be routed.

    ``self.executor.execute_model(x)`` hands its receiver over as written; a call through a local name bound to
    the method (``step = self.executor.execute_model``, ``step(x)``) names the receiver again at the call, which the
    scan allows only when that gives the same object (``Alias.receiver``)."""
    if tp.alias is None:
        return RouteCall(tp.location.file, tp.location.line, tp.code, callee="execute_model", function=function,
                         receiver=True)
    if not tp.alias.receiver:
        return (f"execute_model is called through the local name {tp.alias.name}, and the call cannot name its "
                f"receiver again: {tp.alias.why}")
    return RouteCall(tp.location.file, tp.location.line, tp.code, callee=tp.alias.name, function=function,
                     extra_args=(tp.alias.receiver,))


class TwoPhaseProtocol(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing(protocol_probe.PROBE)
        for location, pairs in ctx.by_location(failing).items():
            tp = _execute_model_call(ctx, location)
            finding = pairs[0][1]
            edit = _route(tp, f"{ctx.shim.alias}.execute_model") if tp is not None else \
                "not a call of execute_model the scan knows"
            if isinstance(edit, str):
                plan.unhandled.append(Unhandled(finding, edit))
                continue
            plan.edits.append(edit)
            plan.claims.append(Claim(protocol_probe.PROBE.name, finding.symbol))
        if plan.edits:
            _, finding = failing[-1]
            error = dict(finding.evidence.extra).get("error_text", "sample_tokens() must follow")
            plan.pieces.append(ShimPiece("protocol:execute_model", CODE,
                                         f"two-phase execution: {error} ({finding.vllm_location})"))
            builds = sorted({b.version for b, _ in failing}, key=lambda v: tuple(int(x) for x in v.split(".")[:3]))
            plan.notes.append(f"execute_model is completed by sample_tokens(None) when it returns None "
                              f"(two-phase in {span([b for b in ctx.builds if b.version in builds])})")
        return plan


FIXER = TwoPhaseProtocol(
    name="protocol",
    description="execute_model() that may return None in two-phase builds: the shim calls sample_tokens(None) "
                "after it, so the next step is accepted.",
    handles=(protocol_probe.PROBE,),
    order=30,
)
