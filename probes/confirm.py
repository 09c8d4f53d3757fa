"""Runtime confirmation: the static verdicts of the semantic probes, observed on a real engine (installed vLLM)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from compat import confirm
from compat.facts import hashing, models, protocol, replies, startup
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext

EXECUTOR = "vllm.v1.executor.multiproc_executor.MultiprocExecutor"
CONFIRMED = {"replies": "reply-shape", "protocol": "protocol", "hashing": "block-hashing", "model": "model",
             "startup": "startup"}


def engine_dtypes(observed: dict) -> str:
    """Which dtype each engine check ran in, and the attempts that came before."""
    checks = {**{k: v for k, v in observed.items() if k.startswith("replies")}, "engine": observed["engine"],
              **{f"model {arch}": seen for arch, seen in observed["models"].items() if arch != "LlamaForCausalLM"}}
    return "; ".join(f"{name}: " + (seen["dtype"] if len(seen.get("attempts", ())) < 2
                                    else " then ".join(seen["attempts"])) for name, seen in checks.items())


class ConfirmProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        if not ctx.confirm:
            return
        static_replies = ctx.fact(f"replies:{EXECUTOR}", lambda s: replies.read(s, EXECUTOR))
        static_protocol = ctx.fact(f"protocol:{EXECUTOR}:{ctx.worker_class}",
                                   lambda s: protocol.read(s, EXECUTOR, ctx.worker_class))
        static_hashing = ctx.fact("hashing", lambda s: hashing.read(s, "vllm.config.CacheConfig",
                                                                    "vllm.v1.request.Request"))
        static_startup = ctx.fact("startup", startup.read)
        steps = [s for s in static_startup.get("steps", []) if s["kind"] in ("executor", "function")]
        observed = confirm.observe(ctx.confirm_timeout, architectures=ctx.architectures)
        ctx.confirmed = {}
        engines = engine_dtypes(observed)
        for finding in self._findings(ctx, observed, static_replies, static_protocol, static_hashing, steps):
            yield replace(finding, evidence=replace(finding.evidence,
                                                    extra=finding.evidence.extra + (("engines", engines),)))

    def _findings(self, ctx: ProbeContext, observed: dict, static_replies: dict, static_protocol: dict,
                  static_hashing: dict, steps: list[dict]) -> Iterable[Finding]:
        for tp in (1, 2):
            yield from self._replies(ctx, tp, static_replies, observed[f"replies_tp{tp}"])
        engine = observed["engine"]
        if "error" in engine or "unconfirmed" in engine:
            yield self._error(ctx, "engine", engine, ("protocol", "block-hashing", "startup", "model"))
            return
        yield self._compare(ctx, "protocol", "execute_model returns None (two-phase)",
                            static_protocol.get("two_phase"), engine["protocol"]["execute_model_returned_none"],
                            extra=self._protocol_text(static_protocol, engine))
        if engine["prefix_caching"]:
            yield self._compare(ctx, "hashing", "a Request without block hasher fails in cache_full_blocks with",
                                static_hashing.get("failure"), engine["hashing"]["failure"],
                                where=engine["hashing"].get("where"))
        for arch, seen in observed["models"].items():
            if "error" in seen or "unconfirmed" in seen:
                yield self._error(ctx, f"model {arch}", seen, ("model",))
                continue
            yield from self._model(ctx, arch, seen["model"])
        listed = {s["name"] for s in steps}
        taken = engine["startup_calls"]
        missed = sorted({name for name in taken if name not in listed} - {"shutdown"})
        yield self._compare(ctx, "startup", "start-up steps the engine took that the static reading does not list",
                            [], missed, extra=(("taken", ", ".join(taken)),
                                               ("listed_not_taken", ", ".join(sorted(listed - set(taken))))))

    def _model(self, ctx: ProbeContext, arch: str, model: dict) -> Iterable[Finding]:
        static = ctx.fact(f"model:{arch}", lambda s: models.read(s, arch))
        for label, static_value, runtime_value in (
                ("path to the decoder stack", static.get("path"), model.get("path")),
                ("base model class", static.get("base"), model.get("base")),
                ("embedding methods", sorted(static.get("embedding", {})), sorted(model.get("embedding", []))),
                ("decoder layer class", (static.get("layer") or {}).get("class"), model.get("layer")),
                ("decoder layer parameters", [p[0] for p in (static.get("layer") or {}).get("parameters", [])],
                 model.get("layer_parameters")),
                ("supports_eagle3", static.get("eagle3"), model.get("eagle3"))):
            yield self._compare(ctx, "model", f"{arch} {label}", static_value, runtime_value)

    def _protocol_text(self, facts: dict, engine: dict) -> tuple[tuple[str, str], ...]:
        second = engine["protocol"].get("second_call")
        return (("static_error_text", str(facts.get("error_text"))), ("runtime_second_call", str(second)))

    def _replies(self, ctx: ProbeContext, tp: int, facts: dict, seen: dict) -> Iterable[Finding]:
        if "error" in seen or "unconfirmed" in seen:
            yield self._error(ctx, f"replies TP={tp}", seen, ("reply-shape",))
            return
        static = facts["multiproc"]
        for key in ("without_rank", "with_rank"):
            yield self._compare(ctx, "replies", f"MultiprocExecutor.collective_rpc {key.replace('_', ' ')} "
                                f"(tensor parallel {tp})", static.get(key), seen["multiproc"][key])
        if "uniproc" in seen and "uniproc" in facts:
            yield self._compare(ctx, "replies", "UniProcExecutor.collective_rpc accepts unique_reply_rank",
                                facts["uniproc"].get("accepts_rank"), seen["uniproc"]["accepts_rank"])
            yield self._compare(ctx, "replies", "UniProcExecutor.collective_rpc reply",
                                facts["uniproc"].get("without_rank"), seen["uniproc"]["without_rank"])

    def _compare(self, ctx: ProbeContext, concern: str, label: str, static, runtime, where: str | None = None,
                 extra: tuple[tuple[str, str], ...] = ()) -> Finding:
        agree = static == runtime
        verdicts = ctx.confirmed.setdefault(CONFIRMED[concern], [])
        verdicts.append((agree, f"{label}: static {static!r}, runtime {runtime!r}"))
        evidence = Evidence(written_for=None, audited=f"static: {static!r}; runtime: {runtime!r}",
                            extra=(("static", repr(static)), ("runtime", repr(runtime))) + extra)
        if agree:
            return Finding(self.name, Status.OK, f"{CONFIRMED[concern]}:{label}", None, where,
                           f"the engine confirms the static verdict: {label} = {runtime!r}", evidence,
                           kind="runtime", touchpoint=f"confirm:{label}")
        return Finding(self.name, Status.ERROR, f"{CONFIRMED[concern]}:{label}", None, where,
                       f"the static reading and the engine disagree on {label}: static {static!r}, runtime "
                       f"{runtime!r}", evidence, fix="trust the runtime verdict; report the disagreement",
                       kind="runtime", touchpoint=f"confirm:{label}")

    def _error(self, ctx: ProbeContext, what: str, result: dict, concerns: tuple[str, ...]) -> Finding:
        """A check that raised is an error; one that died by a signal or timed out confirms nothing (unknown)."""
        extra = tuple((key, str(result[key])) for key in ("last_step", "signal") if result.get(key))
        if "unconfirmed" in result:
            reason = result["unconfirmed"]
            for concern in concerns:
                ctx.confirmed.setdefault(concern, []).append((None, f"could not confirm: {reason}"))
            return Finding(self.name, Status.UNKNOWN, what, None, None, f"could not confirm {what} on a real engine: "
                           f"{reason}", Evidence(traceback=result.get("log"), extra=extra),
                           fix="see the log tail; the static verdicts stand unconfirmed", kind="runtime",
                           touchpoint=f"confirm:{what}")
        return Finding(self.name, Status.ERROR, what, None, None, f"runtime confirmation of {what} failed: "
                       f"{result['error']}", Evidence(traceback=result.get("traceback") or result.get("log"),
                                                      extra=extra),
                       kind="runtime", touchpoint=f"confirm:{what}")


PROBE = ConfirmProbe(
    name="confirm",
    description="With the installed vLLM (--confirm): runs a tiny model on a real engine in child processes with a "
                "timeout and compares what it observes with the static verdicts (reply shapes with tensor parallel 1 "
                "and 2, execution protocol, block hashing, model conventions, start-up steps); a disagreement is an "
                "error finding.",
    order=90,
)
