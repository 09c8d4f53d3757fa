"""The two-phase execution protocol: ``execute_model`` may return None, and ``sample_tokens`` must follow."""

from __future__ import annotations

from compat.consumer.model import Kind
from compat.fix.context import FixContext, span
from compat.fix.edits import RouteCall
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from fixers import Fixer

CODE = '''
def execute_model(executor, scheduler_output, *args, **kwargs):
    """``executor.execute_model(...)``, completed by ``sample_tokens(None)`` when it returns None (a two-phase
    build: the next ``execute_model`` fails unless ``sample_tokens`` ran). Returns the step's output."""
    output = executor.execute_model(scheduler_output, *args, **kwargs)
    if output is None and hasattr(executor, "sample_tokens"):
        output = executor.sample_tokens(None)
    return output
'''


class TwoPhaseProtocol(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing("protocol")
        for location, pairs in ctx.by_location(failing).items():
            tp = ctx.touchpoint(location, Kind.ATTRIBUTE.value)
            finding = pairs[0][1]
            if tp is None or tp.attribute != "execute_model":
                plan.unhandled.append(Unhandled(finding, "not a call of execute_model the scan knows"))
                continue
            plan.edits.append(RouteCall(tp.location.file, tp.location.line, tp.code, callee="execute_model",
                                        function=f"{ctx.shim.alias}.execute_model", receiver=True))
            plan.claims.append(Claim("protocol", finding.symbol))
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
    handles=("protocol",),
    order=30,
)
