"""Call binding: each call's argument shape binds to the audited signature."""

from __future__ import annotations

from compat.consumer.result import Kind, Ref, RefKind, TouchPoint
from compat.findings import Evidence, Finding, Status
from compat.probe import ConsumerDefined, Probe, ProbeContext
from compat.signature import BindCode, BindProblem, Signature, diff
from compat.vllm.surface import Found, FoundKind, Missing, Surface, Unresolved


def _fix(problem: BindProblem, sig: Signature) -> str:
    if problem.code == BindCode.UNEXPECTED_KEYWORD:
        return f"drop `{problem.parameter}=` from the call (the callable no longer takes it)"
    if problem.code == BindCode.MISSING_REQUIRED:
        param = sig.get(problem.parameter or "")
        note = f" ({param.annotation})" if param and param.annotation else ""
        return f"pass `{problem.parameter}=`{note}, which this vLLM requires"
    if problem.code == BindCode.TOO_MANY_POSITIONAL:
        return "pass the arguments by keyword"
    if problem.code == BindCode.POSITIONAL_ONLY_BY_KEYWORD:
        return f"pass `{problem.parameter}` positionally"
    return "pass each argument once"


def _through_class(ctx: ProbeContext, tp: TouchPoint, callee: Found, surface: Surface) -> bool:
    """``Class.method(obj, ...)``: a plain method reached through its class, not an instance (a module-level
    instance such as ``ModelRegistry`` is one), takes ``self`` as its first argument."""
    if callee.kind != FoundKind.METHOD:
        return False
    if tp.kind == Kind.CALL:
        owner = tp.symbol.rpartition(".")[0]
    elif tp.receiver is not None and tp.receiver.kind == RefKind.SYMBOL:
        owner = tp.receiver.symbol or ""
    else:
        return False
    found = surface.lookup(owner)
    return isinstance(found, Found) and found.kind == FoundKind.CLASS


def _stand_in(ctx: ProbeContext, tp: TouchPoint, name: str) -> str | None:
    """A consumer class the receiver may be at run time (a subclass or replacement of its declared vLLM class)
    whose own method takes the call, described; None when there is none."""
    if tp.kind != Kind.ATTRIBUTE or tp.receiver is None or tp.receiver.kind == RefKind.SELF or tp.call is None:
        return None
    owner = ctx.class_of(tp.receiver)
    if not isinstance(owner, Found) or owner.kind != FoundKind.CLASS:
        return None
    for stand in ctx.stand_ins(owner.path):
        if tp.attribute not in stand.names:
            continue
        sig = ctx.consumer_signature(f"{stand.qualname}.{tp.attribute}")
        if sig is None or not sig.drop_first().bind(tp.call, name):
            return stand.describe(owner.path)
    return None


class CallProbe(Probe):
    def applies(self, tp: TouchPoint) -> bool:
        return tp.call is not None and tp.kind in (Kind.CALL, Kind.ATTRIBUTE)

    def _callee(self, ctx: ProbeContext, tp: TouchPoint, surface: Surface):
        if tp.kind == Kind.CALL:
            return ctx.lookup(tp.symbol, surface)
        assert tp.receiver is not None and tp.attribute is not None
        return ctx.callee(Ref(RefKind.ATTRIBUTE, base=tp.receiver, name=tp.attribute), surface)

    def _signature(self, ctx: ProbeContext, tp: TouchPoint, surface: Surface | None):
        if surface is None:
            return None, None
        callee = self._callee(ctx, tp, surface)
        if not isinstance(callee, Found):
            return callee, None
        sig = surface.signature(callee)
        if isinstance(sig, Signature) and _through_class(ctx, tp, callee, surface):
            sig = sig.with_self()
        return callee, sig

    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        assert tp.call is not None
        callee, sig = self._signature(ctx, tp, ctx.surface)
        _, old = self._signature(ctx, tp, ctx.written_for)
        old_sig = old if isinstance(old, Signature) else None
        name = tp.symbol.rsplit(".", 1)[-1] + "()"
        changes = diff(old_sig, sig) if old_sig is not None and isinstance(sig, Signature) else []
        evidence = Evidence(written_for=old_sig.render() if old_sig else None,
                            audited=sig.render() if isinstance(sig, Signature) else None,
                            written_for_build=ctx.written_for.build.version if ctx.written_for else None,
                            extra=(("changes", ", ".join(changes)),) if changes else ())
        if isinstance(callee, Found) and (ctx.replaced(callee.path) or (
                callee.kind == FoundKind.CLASS and ctx.replaced(f"{callee.path}.__init__"))):
            return None  # the consumer replaced it (or the class's __init__): its own code is what calls bind to
        if isinstance(callee, ConsumerDefined) or (isinstance(callee, Unresolved) and callee.outside) or (
                isinstance(sig, Unresolved) and sig.outside):
            return None  # the consumer's own callable, or another library's: nothing of vLLM's to bind against
        if not isinstance(callee, Found):
            status = Status.ERROR if isinstance(callee, Unresolved) and callee.traceback else (
                Status.UNKNOWN if isinstance(callee, Unresolved) else Status.BROKEN)
            if isinstance(callee, Missing) and (tp.narrowed or tp.kind is Kind.ATTRIBUTE):
                return None  # whether a method exists is the attribute probe's to say (an interface's, a check)
            if isinstance(callee, Missing) and name.startswith("__") and name.endswith("__()"):
                return None  # Base.__init__(self): every class has Python's dunders, whatever vLLM declares
            cause = (("cause", callee.reason),) if isinstance(callee, Missing) else ()
            return self.finding(tp, status, f"cannot bind {name}: {callee.reason}", None,
                                Evidence(evidence.written_for, None, evidence.written_for_build,
                                         traceback=getattr(callee, "traceback", None), extra=cause))
        where = ctx.where(callee)
        if isinstance(sig, Unresolved):
            return self.finding(tp, Status.UNKNOWN, f"signature of {callee.path} unknown: {sig.reason}", where,
                                evidence)
        assert isinstance(sig, Signature)
        problems = sig.bind(tp.call, name)
        if problems:
            message = "; ".join(p.message for p in problems)
            fix = "; ".join(_fix(p, sig) for p in problems)
            stand_in = _stand_in(ctx, tp, name)
            if stand_in is not None:
                return self.finding(tp, Status.UNKNOWN, f"{message} as vLLM's {callee.path}; but the object may at "
                                    f"run time be {stand_in}, whose {tp.attribute} takes the call: the runtime "
                                    "class decides", where, evidence)
            return self.finding(tp, Status.BROKEN, message, where, evidence, fix=fix)
        if old_sig is not None and tp.call.positional:
            before, after = old_sig.positional_targets(tp.call), sig.positional_targets(tp.call)
            if before != after:
                shifts = [f"argument {i + 1} now binds to '{a}' (was '{b}')"
                          for i, (b, a) in enumerate(zip(before, after)) if a != b]
                return self.finding(tp, Status.CHANGED, f"{name} binds, but positionally shifted: "
                                    + "; ".join(shifts), where, evidence, fix="pass the arguments by keyword")
        shape = tp.call.render()
        return self.finding(tp, Status.OK, f"{name} binds {shape}", where, evidence)


PROBE = CallProbe(
    name="call",
    description="Each call of a vLLM callable binds to the audited signature: removed or renamed keywords, new "
                "required parameters, positional shifts, keyword-only changes.",
    kinds=(Kind.CALL, Kind.ATTRIBUTE),
    order=20,
)
