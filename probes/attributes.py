"""Attribute and method existence on objects whose vLLM class is known from where they were built."""

from __future__ import annotations

import difflib
from dataclasses import replace

from compat.consumer.result import Kind, RefKind, TouchPoint
from compat.facts.abstract import ABSTRACT_METHODS
from compat.facts.abstract import FACT as ABSTRACT
from compat.findings import Evidence, Finding, Status
from compat.probe import ConsumerDefined, Probe, ProbeContext
from compat.vllm.surface import Found, FoundKind, Missing, Unresolved


def _concrete(ctx: ProbeContext, owner: Found) -> bool:
    """``owner`` is a class of its own, not an interface, mixin or protocol, and leaves no method abstract."""
    interface = ctx.fact(ABSTRACT, owner.path)
    return owner.kind == FoundKind.CLASS \
        and (not interface.interface or not interface.why.startswith(f"{owner.path} ")) \
        and not owner.path.endswith("Mixin") and not ctx.fact(ABSTRACT_METHODS, owner.path).methods


def _served(ctx: ProbeContext, tp: TouchPoint, owner: Found, name: str) -> str | None:
    """How a wrapper's object has ``name`` when its class does not: its ``__getattr__`` forwards it to the object
    it wraps (``Found.wraps``)."""
    if owner.wraps is None or isinstance(ctx.surface.member(replace(owner, wraps=None), name), Found):
        return None
    assert tp.receiver is not None
    held = tp.receiver.name if tp.receiver.kind == RefKind.ATTRIBUTE and tp.receiver.name else "object"
    return (f"served through {owner.path.rpartition('.')[2]}.__getattr__ by the wrapped {held} "
            f"({owner.wraps.path})")


class AttributeProbe(Probe):
    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        assert tp.receiver is not None and tp.attribute is not None
        owner = ctx.class_of(tp.receiver)
        name = tp.attribute
        if isinstance(owner, ConsumerDefined) or (isinstance(owner, Unresolved) and owner.outside):
            return None  # an attribute of the consumer's own object, or another library's: not vLLM's
        if name.startswith("__") and name.endswith("__"):
            return self.finding(tp, Status.OK, f"{name} is Python's, on every object (not vLLM API)")
        if not isinstance(owner, Found):
            status = Status.ERROR if isinstance(owner, Unresolved) and owner.traceback else Status.UNKNOWN
            reason = owner.reason if not isinstance(owner, Missing) else f"the receiver does not exist ({owner.reason})"
            if isinstance(owner, Missing) and tp.narrowed:
                return None  # reached through an attribute the consumer checks for first
            cause = (("cause", owner.reason),) if isinstance(owner, Missing) else ()
            return self.finding(tp, status, f"class of {tp.receiver.render()} unknown, '{name}' not checked: {reason}",
                                evidence=Evidence(traceback=getattr(owner, "traceback", None), extra=cause))
        # super() reaches past the consumer's class: what the class itself defines is not there.
        member = ctx.surface.member(owner, name) if tp.via_super else ctx.member(owner, name)
        before = None
        if ctx.written_for is not None:
            old_owner = ctx.class_of(tp.receiver, ctx.written_for)
            if isinstance(old_owner, Found):
                before = ctx.written_for.member(old_owner, name)
        if isinstance(member, ConsumerDefined) and not (tp.store and isinstance(before, Found)):
            return self.finding(tp, Status.OK, f"{member.reason}: the consumer's own attribute", symbol=member.path)
        if isinstance(member, ConsumerDefined):
            member = ctx.surface.member(owner, name)  # a store vLLM used to read: judged below as missing
        evidence = Evidence(written_for=ctx.where(before), audited=ctx.where(member),
                            written_for_build=ctx.written_for.build.version if ctx.written_for else None)
        label = f"{owner.path}.{name}"
        if isinstance(member, Found):
            what = "method" if tp.call is not None else member.kind
            served = _served(ctx, tp, owner, name)
            if served:
                evidence = replace(evidence, extra=(("served", served),))
            return self.finding(tp, Status.OK, f"{label} exists ({what})" + (f", {served}" if served else ""),
                                ctx.where(member), evidence, symbol=label)
        if isinstance(member, Unresolved) and member.outside:
            return None
        if isinstance(member, Unresolved):
            return self.finding(tp, Status.UNKNOWN, f"cannot tell whether {label} exists: {member.reason}",
                                ctx.where(owner), evidence, symbol=label)
        if tp.narrowed:
            return self.finding(tp, Status.OK, f"{label} is not in this build, and the consumer checks for it before "
                                f"the use ({tp.narrowed})", ctx.where(owner), evidence, symbol=label)
        if not tp.store and tp.receiver.kind not in (RefKind.SYMBOL, RefKind.SELF) and owner.kind == FoundKind.CLASS:
            stand_in = ctx.stand_in_defining(owner.path, name)
            if stand_in is not None:
                return self.finding(tp, Status.UNKNOWN, f"{label} is not in this build, but the object may at run "
                                    f"time be {stand_in.describe(owner.path)}, which defines '{name}': the runtime "
                                    "class decides", ctx.where(owner), replace(evidence, extra=(
                                        ("missing", member.reason),)), symbol=label)
        own = ctx.own_subclass(tp)
        if own is not None and not own.other_bases and _concrete(ctx, owner) and not tp.store:
            # ``self`` in the consumer's subclass of a concrete vLLM class: the object is that subclass.
            below = ctx.descendant_defining(own.patcher, name)
            if below is not None:
                return self.finding(tp, Status.UNKNOWN, f"{label} is not in this build; {own.patcher}'s subclass "
                                    f"{below} defines '{name}', and which of them the object is decides",
                                    ctx.where(owner), replace(evidence, extra=(("missing", member.reason),)),
                                    symbol=label)
        elif not tp.store and tp.receiver.kind != RefKind.SYMBOL and owner.kind == FoundKind.CLASS:
            interface = ctx.fact(ABSTRACT, owner.path)
            if interface.interface:
                return self.finding(tp, Status.UNKNOWN, f"{label} is not declared by the interface the object is "
                                    f"held as ({interface.why}); the class implementing it at runtime decides",
                                    ctx.where(owner), replace(evidence, extra=(("missing", member.reason),)),
                                    symbol=label)
        if tp.via_super and tp.context.endswith(f".{name}"):
            # `super().m(...)` in the consumer's override of m: it runs when the override does, and vLLM, whose
            # class no longer has m, no longer calls it (the patch probe reports the override).
            return self.finding(tp, Status.CHANGED, f"{label} is not in this build: the consumer's override of "
                                f"'{name}' calls it through super(), which fails wherever the override still runs; "
                                "vLLM no longer calls it", ctx.where(owner),
                                replace(evidence, extra=(("missing", member.reason),)), symbol=label)
        names = ctx.surface.member_names(owner) if hasattr(ctx.surface, "member_names") else ()
        close = difflib.get_close_matches(name, list(names), n=2, cutoff=0.6)
        verb = "writes" if tp.store else ("calls" if tp.call is not None else "reads")
        message = f"{owner.path} has no attribute '{name}' in this build (the consumer {verb} it)"
        evidence = replace(evidence, extra=(("missing", member.reason),))
        if tp.store:
            message += "; the value is written but nothing in vLLM reads it"
        fix = f"use {owner.path}.{close[0]}" if close else f"remove the use of '{name}'"
        return self.finding(tp, Status.BROKEN, message, ctx.where(owner), evidence, fix=fix, symbol=label)


PROBE = AttributeProbe(
    name="attribute",
    description="Attributes read or written and methods called on objects whose vLLM class is known (built by "
                "the consumer, returned by annotated calls, or vLLM's worker seen from a worker extension) exist.",
    kinds=(Kind.ATTRIBUTE,),
    order=30,
)
