"""Execution protocol: execute_model may return None and require sample_tokens next; the consumer's step loop."""

from __future__ import annotations

from compat.consumer.result import Kind, RefKind, TouchPoint
from compat.facts import protocol
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext
from compat.vllm.surface import Found


class ProtocolProbe(Probe):
    def applies(self, tp: TouchPoint) -> bool:
        return tp.kind == Kind.ATTRIBUTE and tp.attribute == "execute_model" and tp.call is not None \
            and tp.receiver is not None and tp.receiver.kind != RefKind.WORKER

    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        assert tp.receiver is not None  # applies() asks for one
        overridden = ctx.vllm_calls(tp)
        if overridden is not None:
            # The call passes a step on inside an override vLLM calls: vLLM's engine runs the steps and calls
            # sample_tokens itself; the inbound contract judges the override.
            return self.finding(tp, Status.OK, f"execute_model() is called inside {tp.context}, which overrides "
                                f"{overridden}: vLLM's own engine calls it and drives the steps (sample_tokens "
                                "included), so the consumer runs no step loop of its own here")
        owner = ctx.class_of(tp.receiver)
        member = ctx.surface.member(owner, "execute_model") if isinstance(owner, Found) else owner
        if not isinstance(owner, Found) or not isinstance(member, Found):
            return self.finding(tp, Status.UNKNOWN, f"cannot read execute_model of {tp.receiver.render()}")
        executor, worker = owner.path, ctx.worker_class
        facts = ctx.fact(protocol.FACT, executor, worker)
        if facts.error:
            return self.finding(tp, Status.UNKNOWN, f"cannot tell the execution protocol: {facts.error}")
        samples = [t for t in ctx.scan.touchpoints if t.kind == Kind.ATTRIBUTE and t.attribute == "sample_tokens"
                   and t.receiver is not None and isinstance(held := ctx.class_of(t.receiver), Found)
                   and held.path == executor]
        extra = (("error_text", facts.error_text), ("error_at", facts.error_at),
                 ("executor_sample_tokens", facts.executor_sample_tokens))
        evidence = Evidence(audited=f"{facts.model_runner}.execute_model returns None at {facts.returns_none_at}"
                            if facts.two_phase else f"{facts.model_runner}.execute_model returns its output",
                            extra=tuple((k, v) for k, v in extra if v))
        if not facts.two_phase:
            return self.finding(tp, Status.OK, "execute_model() returns the model output itself; no second step is "
                                "needed", facts.execute_model, evidence, symbol=f"{executor}.execute_model")
        if samples:
            return self.finding(tp, Status.OK, f"execute_model() can return None and sample_tokens() must follow; the "
                                f"consumer calls sample_tokens() at {samples[0].location}", facts.execute_model,
                                evidence, symbol=f"{executor}.execute_model")
        failure = facts.error_text or "the worker's state machine rejects the next step"
        return self.finding(
            tp, Status.BROKEN,
            f"execute_model() returns None in this build (two-phase: {facts.returns_none_at}) and sample_tokens() "
            f"must follow each call; the consumer never calls it, so the next execute_model() fails with "
            f"\"{failure}\" ({facts.error_at or 'in the worker'})", facts.error_at or facts.execute_model,
            evidence, fix="call executor.sample_tokens(None) after every execute_model() that returns None",
            symbol=f"{executor}.execute_model")


PROBE = ProtocolProbe(
    name="protocol",
    description="Whether execute_model can return None and sample_tokens must follow (with the exact error the "
                "build raises when it is skipped), checked against the consumer's step loop.",
    kinds=(Kind.ATTRIBUTE,),
    order=55,
)
