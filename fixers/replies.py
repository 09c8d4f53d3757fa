"""``collective_rpc`` replies: the shape ``unique_reply_rank`` gives changed (a one-entry list, then the value)."""

from __future__ import annotations

from compat.consumer.model import Kind
from compat.facts import replies
from compat.fix.context import FixContext
from compat.fix.edits import RouteCall
from compat.fix.plan import Claim, FixerPlan, ShimPiece, Unhandled
from fixers import Fixer

CODE = '''
def collective_rpc(executor, method, *args, unique_reply_rank=None, **kwargs):
    """``executor.collective_rpc(...)`` with the reply always a list, one entry per worker that answered:
    with ``unique_reply_rank`` a one-entry list holding that worker's value, in every build (asking every
    worker and keeping the chosen rank's reply, since without a rank every audited build answers per worker)."""
    replies = executor.collective_rpc(method, *args, **kwargs)
    return replies if unique_reply_rank is None else [replies[unique_reply_rank]]
'''


class RankReplies(Fixer):
    def plan(self, ctx: FixContext) -> FixerPlan:
        plan = FixerPlan(self.name)
        failing = ctx.failing("reply-shape")
        if not failing:
            return plan
        executor = failing[0][1].symbol.rpartition(".")[0]
        shapes = {b.version: b.fact(replies.FACT, executor).multiproc.without_rank for b in ctx.builds}
        not_lists = sorted(v for v, shape in shapes.items() if shape != "list")
        for location, pairs in ctx.by_location(failing).items():
            finding = pairs[0][1]
            tp = ctx.touchpoint(location, Kind.RPC.value)
            if not_lists:
                plan.unhandled.append(Unhandled(finding, "collective_rpc without a rank does not answer a list in "
                                                         f"vLLM {', '.join(not_lists)}"))
                continue
            if tp is None:
                plan.unhandled.append(Unhandled(finding, "not a collective_rpc call the scan knows"))
                continue
            plan.edits.append(RouteCall(tp.location.file, tp.location.line, tp.code, callee="collective_rpc",
                                        function=f"{ctx.shim.alias}.collective_rpc", receiver=True))
            plan.claims.append(Claim("reply-shape", finding.symbol))
        if plan.edits:
            plan.pieces.append(ShimPiece("replies:collective_rpc", CODE,
                                         f"{executor}.collective_rpc answers one entry per worker without a rank "
                                         "in every audited build; the shim keeps the chosen rank's as a list"))
            plan.notes.append("collective_rpc(..., unique_reply_rank=r) answers [reply of rank r] in every build")
        return plan


FIXER = RankReplies(
    name="replies",
    description="collective_rpc(..., unique_reply_rank=...) whose reply the consumer indexes: the shim answers "
                "a one-entry list in every build.",
    handles=("reply-shape",),
    order=40,
)
