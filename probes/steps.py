"""The consumer's own step loop against what the build's scheduler may do to a prompt between steps.

A loop that finishes every request a step scheduled is right only where each step computes whole prompts, in
the order they were added. Where the build splits a prompt at the step's token budget (chunked prefill on by
default), or runs later prompts ahead of one that does not fit (vLLM 0.11.0 without chunked prefill), the loop
returns rows that belong to other prompts, without an error. Where the build keeps a preempted request waiting
until its last step's output was handed back, a loop that never hands outputs back stops with requests unfinished.
"""

from __future__ import annotations

from functools import partial

from compat.consumer.result import Finishes, Kind, StepLoop
from compat.facts import scheduling
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.probe import Probe, ProbeContext
from compat.vllm.surface import Found, FoundKind

CONFIG = "vllm.config.SchedulerConfig"


def _on(value: str | None) -> bool:
    return value in ("True", "true", "1")


class StepsProbe(Probe):
    def run(self, ctx: ProbeContext) -> list[Finding]:
        return [f for loop in ctx.scan.step_loops if (f := self._judge(ctx, loop)) is not None]

    def _scheduler(self, ctx: ProbeContext, loop: StepLoop) -> Found | None:
        """The vLLM class whose ``schedule`` the loop calls (None: not a vLLM scheduler the audit knows)."""
        for tp in ctx.scan.touchpoints:
            if tp.kind == Kind.ATTRIBUTE and tp.attribute == "schedule" and tp.location == loop.schedule \
                    and tp.receiver is not None:
                owner = ctx.class_of(tp.receiver)
                if isinstance(owner, Found) and owner.kind == FoundKind.CLASS:
                    return owner
        return None

    def _chunked(self, ctx: ProbeContext, facts: scheduling.SchedulingFacts) -> tuple[bool, str]:
        """Whether steps split prompts, and why: the consumer's own SchedulerConfig(enable_chunked_prefill=...)
        or the build's default."""
        for tp in ctx.scan.touchpoints:
            if tp.kind == Kind.CALL and tp.symbol.endswith("SchedulerConfig"):
                given = dict(tp.literals).get("enable_chunked_prefill")
                if given is not None:
                    return _on(given), (f"the consumer's SchedulerConfig(enable_chunked_prefill={given}) at "
                                        f"{tp.location}")
        return (_on(facts.chunked_prefill_default),
                f"SchedulerConfig.enable_chunked_prefill defaults to {facts.chunked_prefill_default} "
                f"({facts.chunked_prefill_at})")

    def _judge(self, ctx: ProbeContext, loop: StepLoop) -> Finding | None:
        owner = self._scheduler(ctx, loop)
        if owner is None:
            return None
        facts = ctx.fact(scheduling.FACT, owner.path, CONFIG)
        if facts.scheduler is None:
            return None
        splits, why = self._chunked(ctx, facts)
        evidence = Evidence(audited=f"chunked prefill: {splits} ({why})",
                            extra=tuple((k, v) for k, v in (
                                ("skips_ahead_at", facts.skips_ahead_at), ("skips_ahead", facts.skips_ahead_text),
                                ("preempts_at", facts.preempts_at), ("holds_preempted_at", facts.holds_preempted_at),
                                ("holds_preempted", facts.holds_preempted_text),
                                ("update_from_output_at", facts.update_from_output_at)) if v))
        if ctx.written_for is not None:
            old = ctx.fact(scheduling.FACT, owner.path, CONFIG, surface=ctx.written_for)
            evidence = Evidence(written_for=f"SchedulerConfig.enable_chunked_prefill defaults to "
                                            f"{old.chunked_prefill_default}" + (
                                                f"; skips ahead ({old.skips_ahead_at})" if old.skips_ahead_at else ""),
                                audited=evidence.audited, written_for_build=ctx.written_for.build.version,
                                extra=evidence.extra)
        where = f"the loop at {loop.location}"
        faults, at = [], None
        if loop.finishes == Finishes.SCHEDULED and splits:
            faults.append(f"{where} finishes every request a step scheduled ({loop.finish}), and this build splits a "
                          f"prompt at the step's token budget ({why}): a prompt the budget cuts is finished after its "
                          "first part, its later rows are never computed, and the rows after it go to other prompts")
            at = facts.chunked_prefill_at
        elif loop.finishes == Finishes.SCHEDULED and facts.skips_ahead_at:
            faults.append(f"{where} takes each step's rows in the order the prompts were added, and without chunked "
                          f"prefill this build leaves a prompt that does not fit what is left of a step's budget for "
                          f"a later step and runs the prompts after it first ({facts.skips_ahead_at}: "
                          f"{facts.skips_ahead_text}): when a call's prompts hold more tokens than one step takes, "
                          "rows come back in another order than the prompts")
            at = facts.skips_ahead_at
        if not loop.updates and facts.holds_preempted_at and (splits or loop.finishes != Finishes.SCHEDULED):
            faults.append(f"{where} never hands a step's output back to the scheduler (update_from_output), and this "
                          f"build keeps a preempted request waiting until it is ({facts.holds_preempted_at}: "
                          f"{facts.holds_preempted_text})" + (
                              ", while the loop stops at the first step with nothing scheduled: after a preemption "
                              "(a full KV cache) it ends with requests unfinished" if loop.stops_when_idle else ""))
            at = at or facts.holds_preempted_at
        symbol = f"{owner.path}.schedule"
        finding = partial(Finding, check=self.name, symbol=symbol, consumer_location=str(loop.location),
                          evidence=evidence, kind=FindingKind.ATTRIBUTE,
                          code=f"while ...{loop.scheduler}.schedule()...", touchpoint=symbol,
                          place=Place.at(loop.location))
        if not faults:
            return finding(status=Status.OK, vllm_location=facts.scheduler,
                           message=f"{where}: each step of this build computes whole prompts in the order they were "
                                   f"added ({why}; the scheduler stops at a prompt that does not fit a step)")
        return finding(status=Status.BROKEN, vllm_location=at or facts.scheduler, message="; ".join(faults),
                       fix="finish a request only once its whole prompt is computed, hand each step's output back "
                           "(update_from_output), keep stepping while requests remain, and give each request its "
                           "own rows by the positions the step computed")


PROBE = StepsProbe(
    name="steps",
    description="The consumer's own scheduler loop against what the build's scheduler may do between steps: split "
                "a prompt at the token budget (chunked prefill), run later prompts first, preempt and hold a "
                "request until its output is handed back.",
    order=57,
)
