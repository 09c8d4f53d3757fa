"""Start-up sequence: steps the engine core performs at start-up that the consumer's hand-built pipeline skips."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import partial

from compat.probes.consequence import Platform

from compat.consumer.result import Kind, TouchPoint
from compat.facts import reach, resolution, startup
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.probe import Probe, ProbeContext
from compat.probes import consequence
from compat.vllm.static import StaticSurface
from compat.vllm.surface import Found, FoundKind


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
            # Neither the step's tests nor what it writes can be read: whether the consumer needs it is not
            # decided by the build's code (being new, or skipped before as well, decides nothing).
            new = before is not None and _norm(step.name) not in before
            history = (f", new since vLLM {then}" if new else f", skipped with vLLM {then} as well"
                       if before is not None else "")
            yield finding(status=Status.UNKNOWN, message=f"the engine core performs {label} at start-up "
                          f"({step.at}){history}; the consumer's hand-built pipeline does not, and what the step "
                          "writes cannot be read from the build's code",
                          evidence=Evidence(written_for="not a start-up step" if new else None,
                                            audited=f"{label} ({step.at})", written_for_build=then),
                          fix=f"repeat what {startup.ENGINE_CORE} does at {step.at} after creating the executor")


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
    stored = {tp.attribute for tp in ctx.scan.touchpoints if tp.kind is Kind.ATTRIBUTE and tp.store and tp.attribute}
    if guard is not True:
        still = _unchanged(static, step.guard, platform, stored)
        if still:
            return Status.OK, (f"the engine core runs it only when {still} changed between two of its own reads "
                               f"(`{step.guard}`), and nothing on the consumer's path assigns it once the configs "
                               "are built, so there is no change to pass on")
    entry = _entry(step, executor, platform)
    walked = ctx.fact(reach.FACT, entry, platform.worker or "") if entry else None
    if walked is None or not walked.defs:
        return None
    wrote = walked.writes
    given = {(c.rsplit(".", 1)[-1], n) for c, names in platform.passed.items() for n in names}
    mine = [w for w in wrote if (w.config.rsplit(".", 1)[-1], w.field) not in given and w.field not in stored
            and not w.constructing]  # an object the step makes is its own, not one the consumer holds
    itself = [(w, by) for w in mine if (by := consequence.state_written_on_path(platform, w)) is not None]
    written = [w for w in mine if all(w is not other for other, _ in itself)]
    reads: list[str] = []
    for config, name in fields:
        value = platform.value(ctx, config, name)[0]
        if value is not resolution.UNKNOWN and not value:
            continue  # a switch that is off here puts nothing on the path in the mode the step completes
        for read in consequence.reads_on_path(ctx, platform, config, name)[:2]:
            reads.append(f"the step's test {config.rsplit('.', 1)[-1]}.{name} ({decided}) decides state the "
                         f"consumer's path reads at {read.render()} ({platform.path.chain(read.function)})")
    seen: set[tuple[str, str, str]] = set()
    for write in written:
        if (write.kind, write.config, write.field) in seen:
            continue
        seen.add((write.kind, write.config, write.field))
        for read in consequence.state_reads_on_path(ctx, platform, write)[:1]:
            reads.append(f"it writes {_state(write)} ({write.at}), which the consumer's path reads at "
                         f"{read.render()} ({platform.path.chain(read.function)}) and the consumer neither passes "
                         "nor assigns")
    if reads:
        status = Status.BROKEN if guard is True else Status.UNKNOWN
        when = "" if guard is True else f" if `{step.guard}` holds, which this build's code does not decide here"
        return status, "; ".join(reads[:3]) + when
    if written:
        shown = ", ".join(sorted({_state(w) for w in written})[:4])
        tested = [(w, r) for w in written for r in consequence.tested_on_path(ctx, platform, w)[:1]]
        if tested:
            said = "; ".join(f"{_state(w)} at {r.render()}" for w, r in tested[:2])
            return Status.OK, (f"nothing on the consumer's path reads what it writes ({shown}) but to test whether "
                               f"it is set, running without it ({said})")
        return Status.OK, f"nothing on the consumer's path reads what it writes ({shown})"
    if itself:
        shown = ", ".join(sorted({f"{_state(w)} at {by.at}" for w, by in itself})[:3])
        return Status.OK, f"the consumer's path runs the statements that write its state itself ({shown})"
    return Status.OK, (f"it writes no state the consumer's objects hold (no config field, module global or attribute "
                       f"of the objects it runs on) in the {len(walked.defs)} defs its calls reach, as far as they "
                       "can be followed; what it returns stays with the engine core")


def _unchanged(static: StaticSurface, guard: str, platform: Platform, stored: set[str]) -> str:
    """``a.b.field != a.b.field`` as a term of the step's test (a value read before and after the engine core's own
    steps, ``max_model_len_after != max_model_len_before``): the config field it compares with itself, where
    neither the consumer's path nor the consumer (``stored``: attributes it assigns) writes it ("" otherwise)."""
    try:
        node = ast.parse(guard, mode="eval").body
    except SyntaxError:
        return ""
    terms = node.values if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) else [node]
    for term in terms:
        if isinstance(term, ast.Compare) and len(term.ops) == 1 and isinstance(term.ops[0], ast.NotEq) and \
                ast.unparse(term.left) == ast.unparse(term.comparators[0]):
            fields = resolution.fields_in(static, ast.unparse(term.left))
            if len(fields) != 1:
                continue
            written = any(w.kind == reach.CONFIG and (w.config, w.field) == fields[0] for w in platform.path.writes)
            if fields[0][1] not in stored and not written:
                return f"{fields[0][0].rsplit('.', 1)[-1]}.{fields[0][1]}"
    return ""


def _state(write: reach.Write) -> str:
    short = write.config.rsplit(".", 1)[-1]
    if write.kind == reach.GLOBAL:
        return f"the module global {short}.{write.field}"
    if write.kind == reach.INSTANCE:
        return f"{short}.{write.field} of the object it runs on"
    return f"{short}.{write.field}"


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
                "skips it too, nothing reads it, or the path runs the same statements itself); a step neither decides "
                "is unknown, whether or not it is new since the build the consumer was written for.",
    order=80,
)
