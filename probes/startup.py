"""Start-up sequence: steps the engine core performs at start-up that the consumer's hand-built pipeline skips."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from compat.probes.consequence import Platform

from compat.consumer.result import Kind, TouchPoint
from compat.facts import hashing, reach, resolution, startup
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.probe import Probe, ProbeContext
from compat.probes import consequence
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
    set_by = next((value for config, field, value in ctx.scan.settings if config == name and field == keyword), None)
    if literal is None and set_by is not None:
        literal, at, opaque = set_by, "the shim's pinned defaults", False
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
        platforms = consequence.platforms(ctx)
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
            judged = _by_state(ctx, step, _anchor_class(ctx, executors[0]), platforms)
            if judged is not None:
                status, message, extra = judged
                yield finding(status=status, message=f"the engine core performs {label} at start-up ({step.at}); "
                              f"the consumer's hand-built pipeline does not: {message}",
                              evidence=Evidence(written_for="not a start-up step" if before is not None and
                                                _norm(step.name) not in before else None,
                                                audited=f"{label} ({step.at})" + (
                                                    f" if {step.guard}" if step.guard else ""),
                                                written_for_build=then, extra=extra),
                              fix=(f"repeat what {startup.ENGINE_CORE} does at {step.at} after creating the executor"
                                   if status is not Status.OK else None))
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


def _anchor_class(ctx: ProbeContext, tp: TouchPoint) -> str:
    found = ctx.lookup(tp.symbol)
    return found.path if isinstance(found, Found) else ""


def _entry(step: startup.Step, executor: str, platform: Platform) -> str:
    if step.kind is startup.StepKind.FUNCTION:
        return step.path or ""
    if step.kind is startup.StepKind.EXECUTOR:
        return f"{executor}.{step.name}"
    return f"{platform.worker}.{step.name}" if platform.worker else ""


def _judge_on(ctx: ProbeContext, step: startup.Step, executor: str,
              platform: Platform) -> tuple[Status, str] | None:
    """One platform's verdict on a skipped step, from the state it writes and the tests it runs under; None when
    neither says anything (no test, no config field written)."""
    static = consequence.static_surface(ctx)
    if static is None:
        return None
    guard = resolution.evaluate(static, step.guard, platform.resolved, platform.passed) if step.guard else True
    fields = resolution.fields_in(static, step.guard) if step.guard else []
    decided = "; ".join(f"{c.rsplit('.', 1)[-1]}.{n} is {consequence.shown(platform.value(ctx, c, n)[0])} "
                        f"({platform.value(ctx, c, n)[1]})" for c, n in fields)
    if guard is False:
        return Status.OK, f"the engine core skips it too, as `{step.guard}` is false there ({decided})"
    entry = _entry(step, executor, platform)
    wrote = ctx.fact(reach.FACT, entry, platform.worker or "").writes if entry else ()
    given = {(c.rsplit(".", 1)[-1], n) for c, names in platform.passed.items() for n in names}
    stored = {tp.attribute for tp in ctx.scan.touchpoints if tp.kind is Kind.ATTRIBUTE and tp.store and tp.attribute}
    written = [w for w in wrote if (w.config.rsplit(".", 1)[-1], w.field) not in given and w.field not in stored]
    reads: list[str] = []
    for config, name in fields:
        value = platform.value(ctx, config, name)[0]
        if value is not resolution.UNKNOWN and not value:
            continue  # a switch that is off here puts nothing on the path in the mode the step completes
        for read in consequence.reads_on_path(ctx, platform, config, name)[:2]:
            reads.append(f"the step's test {config.rsplit('.', 1)[-1]}.{name} ({decided}) decides state the "
                         f"consumer's path reads at {read.render()} ({platform.path.chain(read.function)})")
    seen: set[tuple[str, str]] = set()
    for write in written:
        if (write.config, write.field) in seen:
            continue
        seen.add((write.config, write.field))
        for read in consequence.reads_on_path(ctx, platform, write.config, write.field)[:1]:
            reads.append(f"it writes {write.config.rsplit('.', 1)[-1]}.{write.field} ({write.at}), which the "
                         f"consumer's path reads at {read.render()} ({platform.path.chain(read.function)}) and "
                         "the consumer neither passes nor assigns")
    if reads:
        status = Status.BROKEN if guard is True else Status.UNKNOWN
        when = "" if guard is True else f" if `{step.guard}` holds, which this build's code does not decide here"
        return status, "; ".join(reads[:3]) + when
    if written:
        shown = ", ".join(sorted({f"{w.config.rsplit('.', 1)[-1]}.{w.field}" for w in written})[:4])
        return Status.OK, f"nothing on the consumer's path reads what it writes ({shown})"
    return None


def _by_state(ctx: ProbeContext, step: startup.Step, executor: str,
              platforms: list[Platform]) -> tuple[Status, str, tuple[tuple[str, str], ...]] | None:
    """The step judged on every platform: the worst verdict, each platform's named."""
    verdicts = [(p, _judge_on(ctx, step, executor, p)) for p in platforms]
    known = [(p, v) for p, v in verdicts if v is not None]
    if not known:
        return None
    order = [Status.OK, Status.UNKNOWN, Status.CHANGED, Status.BROKEN]
    worst = max((v[0] for _, v in known), key=order.index)
    if len(known) < len(verdicts) and worst is Status.OK:
        return None
    message = "; ".join(f"on {p.name}: {v[0]}, {v[1]}" for p, v in known)
    extra = tuple((f"platform_{p.name.lower()}", str(v[0])) for p, v in known)
    return worst, message, extra


PROBE = StartupProbe(
    name="startup",
    description="The steps the build's engine core performs between creating the executor and the first step "
                "(memory profiling, KV-cache specs, layout and configuration, worker initialisation), compared with "
                "the consumer's hand-built pipeline, each skipped step judged on every platform by the state it writes "
                "and the tests it runs under (broken where the consumer's path reads it; ok where the engine core "
                "skips it too or nothing reads it); steps neither decides: new since the written-for build, or "
                "ok with why (compat.facts.startup.NOT_NEEDED).",
    order=80,
)
