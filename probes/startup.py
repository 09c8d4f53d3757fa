"""Start-up sequence: steps the engine core performs at start-up that the consumer's hand-built pipeline skips."""

from __future__ import annotations

from collections.abc import Iterable

from compat.consumer.model import Kind
from compat.facts import startup
from compat.findings import Evidence, Finding, Status
from compat.probe import Probe, ProbeContext
from compat.vllm.surface import Found


def _norm(name: str) -> str:
    name = name.lower()
    for prefix in ("get_", "_"):
        name = name.removeprefix(prefix)
    return name.rstrip("s")


class StartupProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        executors = [tp for tp in ctx.scan.touchpoints if tp.kind == Kind.CALL
                     and isinstance(found := ctx.lookup(tp.symbol), Found) and found.kind == "class"
                     and isinstance(ctx.surface.member(found, "collective_rpc"), Found)
                     and isinstance(ctx.surface.member(found, "initialize_from_config"), Found)]
        if not executors:
            return
        anchor = executors[0]
        facts = ctx.fact(startup.FACT)
        if facts.error:
            yield Finding(self.name, Status.UNKNOWN, startup.ENGINE_CORE, str(anchor.location), None,
                          f"cannot read the engine core's start-up: {facts.error}", kind="startup")
            return
        before = None
        if ctx.written_for is not None:
            before = {_norm(s.name) for s in ctx.fact(startup.FACT, surface=ctx.written_for).steps}
        done = set()
        for tp in ctx.scan.touchpoints:
            if tp.kind == Kind.RPC and tp.rpc_method:
                done.add(_norm(tp.rpc_method))
            elif tp.kind == Kind.ATTRIBUTE and tp.call is not None and tp.attribute:
                done.add(_norm(tp.attribute))
            elif tp.kind == Kind.CALL:
                done.add(_norm(tp.symbol.rsplit(".", 1)[-1]))
        for step in facts.steps:
            label = f"{step.kind} {step.name}"
            symbol = step.path or f"{startup.ENGINE_CORE}:{step.name}"
            common = dict(check=self.name, symbol=symbol, consumer_location=str(anchor.location),
                          vllm_location=step.at, kind="startup", code=anchor.code,
                          touchpoint=f"startup:{step.name}")
            if _norm(step.name) in done:
                yield Finding(status=Status.OK, message=f"the engine core's start-up step {label} is done by the "
                              "consumer too", **common)
            elif before is not None and _norm(step.name) not in before:
                yield Finding(status=Status.CHANGED, message=f"the engine core now performs {label} at start-up "
                              f"({step.at}), new since vLLM {ctx.written_for.build.version}; the consumer's "
                              "hand-built pipeline does not",
                              evidence=Evidence(written_for="not a start-up step",
                                                audited=f"{label} ({step.at})",
                                                written_for_build=ctx.written_for.build.version),
                              fix=f"repeat what {startup.ENGINE_CORE} does at {step.at} after creating the "
                                  "executor", **common)
            elif before is not None:
                yield Finding(status=Status.OK, message=f"the consumer skips the start-up step {label}, as it did "
                              f"with vLLM {ctx.written_for.build.version}", **common)
            else:
                yield Finding(status=Status.UNKNOWN, message=f"the engine core performs {label} at start-up "
                              f"({step.at}); the consumer's pipeline does not", **common)


PROBE = StartupProbe(
    name="startup",
    description="The steps the build's engine core performs between creating the executor and the first step "
                "(memory profiling, KV-cache specs, layout and configuration, worker initialisation), compared with "
                "the consumer's hand-built pipeline; steps new since the written-for build that it misses.",
    order=80,
)
