"""Reply shape: what collective_rpc returns with and without unique_reply_rank, and how the consumer uses it."""

from __future__ import annotations

from compat.consumer.result import Kind, RefKind, ReplyUseKind, TouchPoint
from compat.facts import replies
from compat.facts.replies import ReplyShape
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext
from compat.vllm.surface import Found


class ReplyShapeProbe(Probe):
    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        if tp.receiver is None or tp.receiver.kind == RefKind.WORKER:
            return None
        owner = ctx.class_of(tp.receiver)
        rpc = ctx.surface.member(owner, "collective_rpc") if isinstance(owner, Found) else owner
        if not isinstance(owner, Found) or not isinstance(rpc, Found):
            return self.finding(tp, Status.UNKNOWN, f"cannot read collective_rpc of {tp.receiver.render()}: "
                                f"{getattr(rpc, 'reason', 'unknown class')}")
        executor = rpc.path.rsplit(".", 1)[0]
        facts = ctx.fact(replies.FACT, executor).multiproc
        if facts.error:
            return self.finding(tp, Status.UNKNOWN, facts.error)
        with_rank = tp.call is not None and replies.RANK in tp.call.keywords
        shape = facts.with_rank if with_rank else facts.without_rank
        how = f"collective_rpc(..., {replies.RANK}=...)" if with_rank else "collective_rpc(...)"
        where = facts.evidence if with_rank else facts.location
        described: dict[ReplyShape | None, str] = {ReplyShape.SINGLE: "the chosen rank's value itself",
                                                   ReplyShape.LIST: "a list with one entry per worker"}
        evidence = Evidence(audited=f"{how} returns {described.get(shape, shape)} ({facts.evidence})",
                            extra=(("reply_code", facts.text),) if facts.text else ())
        if ctx.written_for is not None:
            old = ctx.fact(replies.FACT, executor, surface=ctx.written_for).multiproc
            old_shape = old.with_rank if with_rank else old.without_rank
            if old_shape and not old.error:
                evidence = Evidence(written_for=f"{how} returns {described.get(old_shape, old_shape)} "
                                                f"({old.evidence})", audited=evidence.audited,
                                    written_for_build=ctx.written_for.build.version, extra=evidence.extra)
        if with_rank and not facts.accepts_rank:
            return self.finding(tp, Status.BROKEN, f"{executor}.collective_rpc takes no {replies.RANK}",
                                facts.location, evidence)
        uses = tp.reply_uses
        if not uses:
            return self.finding(tp, Status.OK, f"{how} returns {described.get(shape, shape)}; "
                                "the scan sees no index, unpack or iteration of the reply", where, evidence,
                                symbol=f"{executor}.collective_rpc")
        problems = []
        for use in uses:
            if shape == ReplyShape.SINGLE and use.kind in (ReplyUseKind.INDEX, ReplyUseKind.UNPACK,
                                                           ReplyUseKind.ITERATE, ReplyUseKind.LEN):
                problems.append(f"`{use.code}` ({use.location}) applies {use.kind} {use.detail} to it, which takes "
                                "apart the value itself (for a list of per-layer tensors, [0] is the first layer) "
                                "without raising")
            elif (shape == ReplyShape.LIST and use.kind == ReplyUseKind.INDEX and use.detail not in ("[0]", "[-1]")
                  and with_rank):
                problems.append(f"`{use.code}` ({use.location}) indexes {use.detail} into a one-entry list")
        if problems:
            fix = f"use the reply of {how} directly, without {uses[0].detail}" if shape == ReplyShape.SINGLE else \
                "index the reply with [0]"
            return self.finding(tp, Status.BROKEN, f"{how} returns {described[shape]} in this build; "
                                + "; ".join(problems), where, evidence, fix=fix,
                                symbol=f"{executor}.collective_rpc")
        used = ", ".join(f"{u.kind} {u.detail} at {u.location}" for u in uses)
        return self.finding(tp, Status.OK, f"{how} returns {described.get(shape, shape)}; the consumer's use "
                            f"({used}) fits", where, evidence, symbol=f"{executor}.collective_rpc")


PROBE = ReplyShapeProbe(
    name="reply-shape",
    description="What collective_rpc returns with and without unique_reply_rank (read from the executor's return "
                "paths), checked against how the consumer indexes, unpacks or iterates the reply.",
    kinds=(Kind.RPC,),
    order=50,
)
