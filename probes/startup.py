"""Start-up sequence: steps the engine core performs at start-up that the consumer's hand-built pipeline skips."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from compat.consumer.result import Kind, TouchPoint
from compat.facts import hashing, startup
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.probe import Probe, ProbeContext
from compat.vllm.surface import Found, FoundKind

CACHE_CONFIG = "vllm.config.CacheConfig"
VLLM_CONFIG = "vllm.config.VllmConfig"
MODEL_CONFIG = "vllm.config.ModelConfig"
REQUEST = "vllm.v1.request.Request"


def _calls_of(ctx: ProbeContext, path: str) -> list[TouchPoint]:
    target = ctx.lookup(path)
    if not isinstance(target, Found):
        return []
    return [tp for tp in ctx.scan.touchpoints if tp.kind == Kind.CALL and tp.symbol.rsplit(".", 1)[-1] ==
            path.rsplit(".", 1)[-1] and isinstance(found := ctx.lookup(tp.symbol), Found) and found.path == target.path]


def _keyword(ctx: ProbeContext, path: str, keyword: str) -> tuple[str | None, str | None, bool]:
    """What the consumer's calls of ``path`` pass as ``keyword``: (the literal, where, whether any passes it in a
    way the scan cannot read)."""
    opaque = False
    for tp in _calls_of(ctx, path):
        literal = dict(tp.literals).get(keyword)
        if literal is not None:
            return literal, str(tp.location), False
        if tp.call is not None and (keyword in tp.call.keywords or tp.call.star_kwargs):
            opaque = True
    return None, None, opaque


def holds(ctx: ProbeContext, assumes: str) -> tuple[bool | None, str]:
    """Whether what a not-needed step's reason assumes of the consumer's pipeline holds, as its source shows
    (None: the scan cannot tell), and why."""
    cls = {startup.PREFIX_CACHING_OFF: CACHE_CONFIG, startup.NO_KV_CONNECTOR: VLLM_CONFIG,
           startup.EAGER: MODEL_CONFIG}[assumes]
    keyword = {startup.PREFIX_CACHING_OFF: "enable_prefix_caching", startup.NO_KV_CONNECTOR: "kv_transfer_config",
               startup.EAGER: "enforce_eager"}[assumes]
    literal, at, opaque = _keyword(ctx, cls, keyword)
    name = cls.rsplit(".", 1)[-1]
    if opaque:
        return None, ""
    if literal is not None:
        said = f"the consumer's {name}({keyword}={literal}) at {at}"
        if assumes == startup.NO_KV_CONNECTOR:
            return literal == "None", said
        on = literal in ("True", "1")
        return (not on if assumes == startup.PREFIX_CACHING_OFF else on), said
    if assumes == startup.PREFIX_CACHING_OFF:
        default = ctx.fact(hashing.FACT, CACHE_CONFIG, REQUEST).prefix_caching_default
        if default is None:
            return None, ""
        said = f"the build's default {name}.{keyword}={default}, which the consumer does not change"
        return default not in ("True", "true", "1"), said
    if assumes == startup.NO_KV_CONNECTOR and _calls_of(ctx, cls):
        return True, f"the consumer's {name}(...) passes no {keyword}"
    return None, ""


def _norm(name: str) -> str:
    name = name.lower()
    for prefix in ("get_", "_"):
        name = name.removeprefix(prefix)
    return name.rstrip("s")


class StartupProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        executors = [tp for tp in ctx.scan.touchpoints if tp.kind == Kind.CALL
                     and isinstance(found := ctx.lookup(tp.symbol), Found) and found.kind == FoundKind.CLASS
                     and isinstance(ctx.surface.member(found, "collective_rpc"), Found)
                     and isinstance(ctx.surface.member(found, "initialize_from_config"), Found)]
        if not executors:
            return
        anchor = executors[0]
        place = Place.at(anchor.location)
        facts = ctx.fact(startup.FACT)
        if facts.error:
            yield Finding(self.name, Status.UNKNOWN, startup.ENGINE_CORE, str(anchor.location), None,
                          f"cannot read the engine core's start-up: {facts.error}", kind=FindingKind.STARTUP,
                          place=place)
            return
        before, then = None, ctx.written_for.build.version if ctx.written_for is not None else None
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
            finding = partial(Finding, check=self.name, symbol=symbol, consumer_location=str(anchor.location),
                              vllm_location=step.at, kind=FindingKind.STARTUP, code=anchor.code,
                              touchpoint=f"startup:{step.name}", place=place)
            if _norm(step.name) in done:
                yield finding(status=Status.OK, message=f"the engine core's start-up step {label} is done by the "
                              "consumer too")
                continue
            new = before is not None and _norm(step.name) not in before
            unneeded = startup.NOT_NEEDED.get(step.name)
            state, why = holds(ctx, unneeded.assumes) if unneeded and unneeded.assumes else (True, "")
            if (new or before is None) and unneeded is not None and state is not False:
                said = (unneeded.text() if state is None or unneeded.assumes is None
                        else f"{unneeded.reason} ({unneeded.assumes}: {why})")
                yield finding(status=Status.OK, message=f"the consumer's hand-built pipeline skips the start-up step "
                              f"{label} ({step.at}), which its correctness does not depend on: {said}")
            elif new:
                unmet = (f"; it could be skipped if {unneeded.assumes} ({unneeded.reason}), but {why}"
                         if unneeded is not None else "")
                yield finding(status=Status.CHANGED, message=f"the engine core now performs {label} at start-up "
                              f"({step.at}), new since vLLM {then}; the consumer's "
                              f"hand-built pipeline does not{unmet}",
                              evidence=Evidence(written_for="not a start-up step",
                                                audited=f"{label} ({step.at})",
                                                written_for_build=then),
                              fix=f"repeat what {startup.ENGINE_CORE} does at {step.at} after creating the "
                                  "executor")
            elif before is not None:
                yield finding(status=Status.OK, message=f"the consumer skips the start-up step {label}, as it did "
                              f"with vLLM {then}")
            else:
                yield finding(status=Status.UNKNOWN, message=f"the engine core performs {label} at start-up "
                              f"({step.at}); the consumer's pipeline does not")

PROBE = StartupProbe(
    name="startup",
    description="The steps the build's engine core performs between creating the executor and the first step "
                "(memory profiling, KV-cache specs, layout and configuration, worker initialisation), compared with "
                "the consumer's hand-built pipeline; steps new since the written-for build that it misses (those its "
                "correctness does not depend on are ok, with why: compat.facts.startup.NOT_NEEDED).",
    order=80,
)
