"""Runtime confirmation: the static verdicts of the semantic probes, observed on a real engine (installed vLLM)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from enum import Enum
from typing import Any

from compat.facts import architectures, hashing, observed, protocol, replies, startup, streams
from compat.findings import Confirmation, Evidence, Finding, FindingKind, Status
from compat.probe import Probe, ProbeContext

EXECUTOR = "vllm.v1.executor.multiproc_executor.MultiprocExecutor"
CACHE_CONFIG = "vllm.config.CacheConfig"
REQUEST = "vllm.v1.request.Request"
CONFIRMED = {"replies": "reply-shape", "protocol": "protocol", "hashing": "block-hashing", "model": "model",
             "startup": "startup"}
"""The probe whose static verdicts each concern of the confirmation checks."""


class ConfirmProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        if not ctx.confirm:
            return
        seen = ctx.fact(observed.FACT, ctx.confirm_timeout, ctx.architectures)
        engines = seen.engine_dtypes()
        for finding in self._findings(ctx, seen):
            yield replace(finding, evidence=replace(finding.evidence,
                                                    extra=finding.evidence.extra + (("engines", engines),)))

    def _findings(self, ctx: ProbeContext, seen: observed.Observations) -> Iterable[Finding]:
        static_replies = ctx.fact(replies.FACT, EXECUTOR)
        for tp, check in seen.replies:
            yield from self._replies(tp, static_replies, check)
        engine = seen.engine.engine
        if engine is None:
            yield self._failed("engine", seen.engine.run, ("protocol", "block-hashing", "startup", "model"))
            return
        static_protocol = ctx.fact(protocol.FACT, EXECUTOR, ctx.worker_class)
        yield self._compare("protocol", "execute_model returns None (two-phase)",
                            None if static_protocol.error else static_protocol.two_phase,
                            engine.protocol.execute_model_returned_none,
                            extra=(("static_error_text", str(static_protocol.error_text)),
                                   ("runtime_second_call", str(engine.protocol.second_call))))
        if engine.prefix_caching:
            static_hashing = ctx.fact(hashing.FACT, CACHE_CONFIG, REQUEST)
            yield self._compare("hashing", "a Request without block hasher fails in cache_full_blocks with",
                                static_hashing.failure, engine.hashing.failure, where=engine.hashing.where)
        for arch, check in seen.models:
            if check.model is None:
                yield self._failed(f"model {arch}", check.run, ("model",))
                continue
            yield from self._model(ctx.fact(architectures.FACT, arch), arch, check.model,
                                   ctx.fact(streams.FACT, arch))
        listed = {s.name for s in ctx.fact(startup.FACT).steps
                  if s.kind in (startup.StepKind.EXECUTOR, startup.StepKind.FUNCTION)}
        taken = list(engine.startup_calls)
        missed = sorted({name for name in taken if name not in listed} - {"shutdown"})
        yield self._compare("startup", "start-up steps the engine took that the static reading does not list",
                            [], missed, extra=(("taken", ", ".join(taken)),
                                               ("listed_not_taken", ", ".join(sorted(listed - set(taken))))))

    def _model(self, static: architectures.ModelFacts, arch: str, model: observed.ModelSeen,
               stream: streams.StreamFacts | None = None) -> Iterable[Finding]:
        layer = static.layer
        for label, static_value, runtime_value in (
                ("path to the decoder stack", _list(static.path), _list(model.path)),
                ("base model class", static.base, model.base),
                ("embedding methods", sorted(static.embedding), sorted(model.embedding)),
                ("decoder layer class", layer.cls if layer else None, model.layer),
                ("decoder layer parameters", [p.name for p in layer.parameters] if layer else [],
                 list(model.layer_parameters)),
                ("supports_eagle3", static.eagle3, model.eagle3)):
            yield self._compare("model", f"{arch} {label}", static_value, runtime_value)
        if stream is not None and model.stream is None and (model.stream_note or "").startswith("not observed"):
            yield Finding(self.name, Status.UNKNOWN, f"{CONFIRMED['model']}:{arch} residual stream outputs", None,
                          None, f"could not confirm on a real engine which outputs of {arch}'s decoder layers sum to "
                          f"the residual stream: {model.stream_note}", Evidence(),
                          kind=FindingKind.RUNTIME, touchpoint=f"confirm:{arch} residual stream outputs")
        elif stream is not None:
            # Which outputs sum to the residual stream after each layer: read from the layer's code, and seen on
            # the engine against HF transformers' own state after the layer.
            yield self._compare("model", f"{arch} decoder layer outputs that sum to the residual stream",
                                list(stream.outputs) if stream.outputs is not None else None,
                                list(model.stream) if model.stream is not None else None,
                                extra=(("runtime_note", model.stream_note or f"relative error {model.stream_error}"),))

    def _replies(self, tp: int, facts: replies.ReplyFacts, check: observed.Check) -> Iterable[Finding]:
        seen = check.replies
        if seen is None:
            yield self._failed(f"replies TP={tp}", check.run, ("reply-shape",))
            return
        static = facts.multiproc
        for key in ("without_rank", "with_rank"):
            yield self._compare("replies", f"MultiprocExecutor.collective_rpc {key.replace('_', ' ')} "
                                f"(tensor parallel {tp})", None if static.error else getattr(static, key),
                                getattr(seen.multiproc, key))
        if seen.uniproc is not None and seen.multiproc_class is not None:
            yield self._compare("replies", "multiprocess executor class", static.executor, seen.multiproc_class)
        if seen.uniproc is not None and seen.uniproc_class is not None:
            yield self._compare("replies", "single-process executor class",
                                facts.uniproc.executor if facts.uniproc is not None else None, seen.uniproc_class)
        if seen.uniproc is not None and facts.uniproc is not None:
            uniproc = facts.uniproc
            yield self._compare("replies", "UniProcExecutor.collective_rpc accepts unique_reply_rank",
                                None if uniproc.error else uniproc.accepts_rank, seen.uniproc.accepts_rank)
            yield self._compare("replies", "UniProcExecutor.collective_rpc reply",
                                None if uniproc.error else uniproc.without_rank, seen.uniproc.without_rank)

    def _compare(self, concern: str, label: str, static: Any, runtime: Any, where: str | None = None,
                 extra: tuple[tuple[str, str], ...] = ()) -> Finding:
        static = static.value if isinstance(static, Enum) else static  # shown as the runtime's plain value
        agree = static == runtime
        confirmation = Confirmation((CONFIRMED[concern],), agree, f"{label}: static {static!r}, runtime {runtime!r}")
        evidence = Evidence(written_for=None, audited=f"static: {static!r}; runtime: {runtime!r}",
                            extra=(("static", repr(static)), ("runtime", repr(runtime))) + extra)
        if agree:
            return Finding(self.name, Status.OK, f"{CONFIRMED[concern]}:{label}", None, where,
                           f"the engine confirms the static verdict: {label} = {runtime!r}", evidence,
                           kind=FindingKind.RUNTIME, touchpoint=f"confirm:{label}", confirmation=confirmation)
        return Finding(self.name, Status.ERROR, f"{CONFIRMED[concern]}:{label}", None, where,
                       f"the static reading and the engine disagree on {label}: static {static!r}, runtime "
                       f"{runtime!r}", evidence, fix="trust the runtime verdict; report the disagreement",
                       kind=FindingKind.RUNTIME, touchpoint=f"confirm:{label}", confirmation=confirmation)

    def _failed(self, what: str, run: observed.Run, probes: tuple[str, ...]) -> Finding:
        """A check that raised is an error; one that died by a signal or timed out, or whose model the engine
        refused to run, confirms nothing (unknown, with the reason)."""
        extra = tuple((key, str(value)) for key, value in (("last_step", run.last_step), ("signal", run.signal))
                      if value)
        if run.unconfirmed:
            return Finding(self.name, Status.UNKNOWN, what, None, None, f"could not confirm {what} on a real engine: "
                           f"{run.unconfirmed}", Evidence(traceback=run.log, extra=extra),
                           fix="see the log tail; the static verdicts stand unconfirmed", kind=FindingKind.RUNTIME,
                           touchpoint=f"confirm:{what}",
                           confirmation=Confirmation(probes, None, f"could not confirm: {run.unconfirmed}"))
        if run.unsupported:
            reason = f"the engine cannot run it here: {run.unsupported}"
            return Finding(self.name, Status.UNKNOWN, what, None, None, f"could not confirm {what} on a real engine: "
                           f"{reason}", Evidence(traceback=run.traceback or run.log, extra=extra),
                           fix="confirm it on a build or platform that runs the model; the static verdicts stand "
                               "unconfirmed", kind=FindingKind.RUNTIME, touchpoint=f"confirm:{what}",
                           confirmation=Confirmation(probes, None, f"could not confirm: {reason}"))
        return Finding(self.name, Status.ERROR, what, None, None, f"runtime confirmation of {what} failed: "
                       f"{run.error}", Evidence(traceback=run.traceback or run.log, extra=extra),
                       kind=FindingKind.RUNTIME, touchpoint=f"confirm:{what}")


def _list(path: tuple[str, ...] | None) -> list[str] | None:
    return list(path) if path is not None else None


PROBE = ConfirmProbe(
    name="confirm",
    description="With the installed vLLM (--confirm): runs a tiny model on a real engine in child processes with a "
                "timeout and compares what it observes with the static verdicts (reply shapes with tensor parallel 1 "
                "and 2, execution protocol, block hashing, model conventions, start-up steps); a disagreement is an "
                "error finding.",
    order=90,
)
