"""Patches: the consumer's code that takes the place of a vLLM name must still have something to replace, and
must still take the arguments vLLM's own callers pass.

A method of a patch class (``class P(ArcticPatch[GPUModelRunner])``), an override in a subclass of a vLLM class,
or a function assigned over vLLM's (``Scheduler.schedule = my_schedule``) is called by vLLM with vLLM's
arguments. When vLLM drops or renames the name, the consumer's code is silently never called; when vLLM changes
what it passes, the consumer's code fails when called. What a consumer adds (a name vLLM does not have) is its
own and is not checked here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, replace

from compat.consumer.result import Kind, PatchKind, TouchPoint
from compat.facts.abstract import ABSTRACT_METHODS
from compat.facts.callers import FACT as CALLERS
from compat.facts.callers import CallSite
from compat.facts.lineage import FACT as LINEAGE
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.probe import Probe, ProbeContext
from compat.probes import consequence
from compat.signature import CallShape, ParamKind, Signature
from compat.vllm.surface import Found, FoundKind, Missing, Surface

_HOW = {PatchKind.PATCH: "the patch", PatchKind.SUBCLASS: "the override", PatchKind.REPLACE: "the replacement"}

NO_SIGNATURE_CHECK = (FoundKind.CLASS, FoundKind.ATTRIBUTE, FoundKind.INSTANCE_ATTRIBUTE, FoundKind.PROPERTY)
"""What vLLM defines there when a replacement is not checked against its signature: not a function."""


def calls_vllm_makes(sig: Signature) -> list[CallShape]:
    """The calls vLLM's own callers may make of a callable with signature ``sig``: its required arguments
    (positional ones positionally), alone and with each optional one by keyword."""
    positional = sum(1 for p in sig.parameters if p.required and p.kind in (
        ParamKind.POSITIONAL_ONLY, ParamKind.POSITIONAL_OR_KEYWORD))
    keywords = tuple(p.name for p in sig.parameters if p.required and p.kind == ParamKind.KEYWORD_ONLY)
    return [CallShape(positional, keywords)] + [
        CallShape(positional, keywords + (p.name,)) for p in sig.parameters
        if not p.required and p.kind in (ParamKind.POSITIONAL_OR_KEYWORD, ParamKind.KEYWORD_ONLY)]


def refusals(replacement: Signature, sig: Signature) -> list[str]:
    """How the consumer's ``replacement`` fails calls vLLM makes of ``sig`` (empty: it takes them all)."""
    found: list[str] = []
    for call in calls_vllm_makes(sig):
        for problem in replacement.bind(call, "it"):
            if problem.message not in found:
                found.append(problem.message)
    return found


@dataclass(frozen=True)
class VllmCalls:
    """The build's own calls of a method by name that may reach the consumer's code: those whose shape binds to
    vLLM's own signature of it (calls of same-named methods of other classes mostly do not), outside methods the
    consumer overrides itself (``Scheduler.schedule`` in a consumer's scheduler: its own code calls instead)."""

    sites: tuple[CallSite, ...]
    set_aside: tuple[str, ...] = ()
    unknown: str = ""
    elsewhere: tuple[str, ...] = ()
    """Calls of the name on receivers declared as classes the consumer's code does not stand in for."""
    """The calls that unpack ``*args``/``**kwargs`` (what they pass is not read), said; "" when none do."""

    def judged(self, mine: Signature) -> list[tuple[CallSite, list]]:
        return [(site, mine.bind(site_shape(site), "it")) for site in self.sites]

    def render(self) -> str:
        text = ", ".join(f"{site.at}" for site in self.sites[:4]) + (
            f" and {len(self.sites) - 4} more" if len(self.sites) > 4 else "") or "none"
        if self.set_aside:
            text += f"; set aside, in methods the consumer overrides or replaces: {', '.join(self.set_aside[:4])}"
        return text


def site_shape(site: CallSite) -> CallShape:
    return CallShape(site.positional, site.keywords)


def vllm_calls(ctx: ProbeContext, name: str | None, sig: Signature, owner: str = "",
               override: bool = False) -> VllmCalls:
    """``override``: the consumer's code is a subclass's override of ``owner``'s method, which runs only on the
    consumer's own objects: a call on a receiver declared as another subclass of ``owner`` (vLLM's own sibling of the
    consumer's class) never reaches it. A method assigned over ``owner``'s runs for its subclasses too."""
    if not name:
        return VllmCalls((), unknown="the method's name is not known")
    sites, aside, unpacking, elsewhere = [], [], [], []
    ancestors = ctx.fact(LINEAGE, owner).ancestors if owner else ()
    for site in ctx.fact(CALLERS, name).sites:
        if site.receiver and ancestors and site.receiver not in ancestors and site.receiver != owner and (
                override or owner not in ctx.fact(LINEAGE, site.receiver).ancestors):
            elsewhere.append(f"{site.at} (on {site.receiver})")
            continue  # the receiver is declared as a class the consumer's code does not stand in for
        if site.unpacks:
            unpacking.append(site.at)
            continue
        if sig.bind(site_shape(site), name):
            continue  # not a call of this method (another class's method of the same name)
        owner, _, method = site.function.rpartition(".")
        if (ctx.stand_in_defining(owner, method) is not None and not any(
                method in cls.extends for cls in ctx.scan.classes)) or (
                ctx.replaced(site.function) is not None and not ctx.reads_original(site.function)):
            aside.append(site.at)  # the def it sits in is the consumer's own now (and vLLM's is not kept to call)
            continue
        sites.append(site)
    unknown = f"; those at {', '.join(unpacking[:3])} pass *args/**kwargs" if unpacking else ""
    return VllmCalls(tuple(sites), tuple(aside), unknown, tuple(elsewhere))


_CONSTRUCTION = ("__init__", "__post_init__", "__new__")


def _stale_state(ctx: ProbeContext, patcher: str, owner: Found) -> tuple[str, str] | None:
    """``(x, reader)`` when the override ``patcher`` (``pkg.Class.method``), which vLLM no longer calls, is the
    only method of its class (bases and subclasses of the consumer's included) to write ``self.x`` after
    construction, and a method of the class that vLLM still has or the consumer adds reads it; else None."""
    qualname, _, method = patcher.rpartition(".")
    own = ctx.consumer_class(qualname)
    if own is None:
        return None
    bases = [base for base in map(ctx.consumer_class, own.bases) if base is not None]
    family = [own, *bases, *ctx.descendants(qualname)]
    states = [(cls, state) for cls in family for state in cls.state]
    mine = next((state for cls, state in states if cls is own and state.method == method), None)
    if mine is None:
        return None
    for attr in mine.writes:
        if any(attr in state.writes for _, state in states if state.method not in (method, *_CONSTRUCTION)):
            continue
        for cls, state in states:
            if state.method in (method, *_CONSTRUCTION) or attr not in state.reads:
                continue
            if _gone(ctx, owner, state.method):
                continue  # another override vLLM no longer calls: it reads nothing any more either
            return attr, f"{cls.qualname}.{state.method}"
    return None


def _renamed(ctx: ProbeContext, patcher: str, owner: Found, name: str) -> str | None:
    """The member of ``owner`` that took the place of ``name``, which is gone: one new since the build written for
    whose name extends ``name`` or differs from it only by leading underscores (``get_cache_scale`` ->
    ``get_cache_scale_mapper``, ``run_model`` -> ``_run_model``), and which the consumer's class (or a subclass of
    it) does not define; None when there is none or more than one."""
    if ctx.written_for is None or not hasattr(ctx.surface, "member_names"):
        return None
    then = ctx.written_for.lookup(owner.path)
    if not isinstance(then, Found) or not hasattr(ctx.written_for, "member_names"):
        return None
    new = set(ctx.surface.member_names(owner)) - set(ctx.written_for.member_names(then))
    bare = name.lstrip("_")
    candidates = sorted(m for m in new if m.lstrip("_") == bare or m.startswith(f"{name}_"))
    qualname = patcher.rpartition(".")[0]
    own = ctx.consumer_class(qualname)
    candidates = [m for m in candidates if not (own is not None and m in own.methods)
                  and ctx.descendant_defining(qualname, m) is None]
    return candidates[0] if len(candidates) == 1 else None


def _gone(ctx: ProbeContext, owner: Found, method: str) -> bool:
    """``method`` overrides a name of ``owner`` that the build written for had and this one lacks."""
    if ctx.written_for is None or not isinstance(ctx.surface.member(owner, method), Missing):
        return False
    then = ctx.written_for.lookup(owner.path)
    return isinstance(then, Found) and isinstance(ctx.written_for.member(then, method), Found)


def _completed_below(ctx: ProbeContext, qualname: str, missing: set[str]) -> bool:
    """A consumer class deriving from ``qualname`` defines the missing methods: ``qualname`` is an intermediate
    base the consumer completes, not the class it builds."""
    return any(missing <= set(cls.methods) for cls in ctx.descendants(qualname))


def _stand_in(ctx: ProbeContext, patcher: str, cls: Found) -> tuple[Status, str] | None:
    """A consumer class assigned over vLLM's class ``cls`` without deriving from it: vLLM's code calls the methods
    of ``cls`` on what it finds there, so each method vLLM calls (on a receiver declared as ``cls`` or a base of
    it, outside that class's own methods) must be on the replacement, and take what the call passes. With the
    build it was written for, a method vLLM called there too is left out: the replacement worked there, so that
    call is not on its path.
    None where the replacement derives from ``cls`` (what it lacks is inherited) or is not a consumer class."""
    mine = ctx.consumer_class(patcher)
    static = consequence.static_surface(ctx)
    if mine is None or static is None:
        return None
    lineage = [c for c in [mine, *[ctx.consumer_class(b) for b in mine.bases]] if c is not None]
    names = {c.qualname for c in lineage}
    if any(b.startswith("vllm.") for c in lineage for b in c.bases) or any(
            p.patcher in names and p.kind == PatchKind.SUBCLASS for p in ctx.scan.class_patches):
        return None  # derives from a vLLM class (named, or fetched at run time): inherited methods are vLLM's own
    defined = {m for c in lineage for m in c.methods}
    found = static.lookup(cls.path)  # the static reading's own answer (a memoised one carries no definition)
    model = static.class_model(found) if isinstance(found, Found) else None
    if model is None:
        return None
    related = set(ctx.fact(LINEAGE, cls.path).ancestors) | {cls.path}

    def reaches(site: CallSite) -> bool:
        """Only a receiver declared as the class (or a base of it) may be what vLLM finds where the replacement
        was put; ``self``/``super()`` in a method of vLLM's own class is an object of that class, and vLLM's
        subclasses were made over the original: neither ever is the replacement."""
        return site.receiver in related and site.receiver != site.function.rpartition(".")[0]

    def calls(name: str, surface: Surface | None = None) -> list[CallSite]:
        return [site for site in ctx.fact(CALLERS, name, surface=surface).sites if reaches(site)]

    missing, refused, called = [], [], 0
    for klass in static.mro(model)[0]:
        for node in klass.node.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name in _CONSTRUCTION or \
                    node.name.startswith("__"):
                continue
            sites = calls(node.name)
            if not sites:
                continue
            called += 1
            if node.name not in defined and ctx.written_for is not None and calls(node.name, ctx.written_for):
                continue  # vLLM called it there too, where the replacement worked: not on its path
            if node.name not in defined:
                missing.append(f"{node.name} (vLLM calls it at {sites[0].at}: {sites[0].code})")
                continue
            owner = next(c for c in lineage if node.name in c.methods)
            sig = owner.signature(node.name)
            problems = [(site, sig.drop_first().bind(site_shape(site), node.name)) for site in sites
                        if not site.unpacks] if sig is not None else []
            bad = next(((site, p) for site, p in problems if p), None)
            if bad is not None:
                refused.append(f"{node.name} refuses vLLM's call at {bad[0].at} ({bad[0].code}): "
                               f"{'; '.join(p.message for p in bad[1])}")
    if missing or refused:
        said = "; ".join([*(f"it lacks {m}" for m in missing[:4]), *refused[:3]])
        return Status.BROKEN, (f"it does not derive from it, and vLLM calls on what it finds there methods the "
                               f"replacement does not take as vLLM calls them: {said}")
    if not called:
        return None
    return Status.OK, (f"it does not derive from it, and defines each of the {called} methods vLLM's code calls on "
                       "an object of that class, taking what the calls pass")


def _takes_anything(sig: Signature) -> bool:
    """``(*args, **kwargs)``-style: the signature does not say what its callers pass (a decorator's wrapper)."""
    return any(p.kind in (ParamKind.VAR_POSITIONAL, ParamKind.VAR_KEYWORD) for p in sig.parameters)


class PatchProbe(Probe):
    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        replacement = tp.replacement
        if replacement is None or tp.receiver is None or tp.attribute is None:
            return None
        how = _HOW.get(replacement.how, "the patch")
        owner = ctx.lookup(tp.receiver.symbol or "")
        if not isinstance(owner, Found):
            return None  # the target itself is missing: its import or attribute reports that
        now = ctx.surface.member(owner, tp.attribute)
        then = self._member(ctx.written_for, tp.receiver.symbol or "", tp.attribute)
        vllms = then if ctx.written_for is not None else now
        if not isinstance(vllms, Found):
            return None  # the consumer's own addition, not a replacement of vLLM's
        target = f"{owner.path}.{tp.attribute}"
        if isinstance(now, Missing):
            # An override vLLM stops calling fails nothing by itself (the consumer's class still has the method):
            # what it did is no longer done, which may matter or not (changed), unless the class's other code reads
            # state only the override wrote (broken). A patch or a replacement assigned over a name that is gone is
            # the consumer's code missing its target (broken).
            stale = _stale_state(ctx, replacement.patcher, owner) if replacement.how == PatchKind.SUBCLASS else None
            if stale is not None:
                attr, reader = stale
                return self.finding(
                    tp, Status.BROKEN, f"{target}, which the override {replacement.patcher} replaces, is gone from "
                    f"this build, so vLLM no longer calls the override; it was the only method to write self.{attr} "
                    f"after construction, and {reader} still reads it: what it reads is no longer kept up to date",
                    evidence=Evidence(written_for=f"{target} exists", audited=now.reason,
                                      written_for_build=ctx.written_for.build.version if ctx.written_for else None,
                                      extra=(("writes", f"self.{attr}"), ("read by", reader))),
                    fix=f"find what replaced {target} in this build and write self.{attr} from there",
                    symbol=target)
            renamed = _renamed(ctx, replacement.patcher, owner, tp.attribute) if replacement.how == PatchKind.SUBCLASS \
                else None
            if renamed is not None:
                return self.finding(
                    tp, Status.BROKEN, f"{target}, which the override {replacement.patcher} replaces, is gone from "
                    f"this build, and {owner.path} has {renamed} instead, new since the build it was written for, "
                    f"which the consumer's class does not override: vLLM calls its own {renamed} where it called the "
                    "override, so what the override did is no longer done",
                    evidence=Evidence(written_for=f"{target} exists", audited=now.reason,
                                      written_for_build=ctx.written_for.build.version if ctx.written_for else None,
                                      extra=(("renamed to", f"{owner.path}.{renamed}"),)),
                    fix=f"override {owner.path}.{renamed} with what {replacement.patcher} does", symbol=target)
            status = Status.CHANGED if replacement.how == PatchKind.SUBCLASS else Status.BROKEN
            return self.finding(
                tp, status, f"{target}, which {how} {replacement.patcher} replaces, is gone from this build: "
                f"vLLM no longer calls it, so the consumer's code there runs only where the consumer calls it itself "
                f"({now.reason})",
                evidence=Evidence(written_for=f"{target} exists", audited=now.reason,
                                  written_for_build=ctx.written_for.build.version if ctx.written_for else None),
                fix=f"find what replaced {target} in this build and patch that", symbol=target)
        if not isinstance(now, Found):
            return self.finding(tp, Status.UNKNOWN, f"cannot tell whether {target} exists: {now.reason}",
                                symbol=target)
        where = str(now.location) if now.location else None
        if now.kind == FoundKind.CLASS and replacement.how == PatchKind.REPLACE:
            stand_in = _stand_in(ctx, replacement.patcher, now)
            if stand_in is not None:
                status, message = stand_in
                return self.finding(tp, status, f"{how} {replacement.patcher} replaces {target}: {message}", where,
                                    symbol=target,
                                    fix=f"define what vLLM calls on {target} on {replacement.patcher}, or derive it "
                                        f"from {target}" if status is Status.BROKEN else None)
        if replacement.signature is None or now.kind in NO_SIGNATURE_CHECK:
            return self.finding(tp, Status.OK, f"{how} {replacement.patcher} replaces {target}, which this build has",
                                where, symbol=target)
        mine = replacement.signature
        if owner.kind == FoundKind.CLASS and now.kind != FoundKind.STATICMETHOD:
            mine = mine.drop_first()  # self (or cls): vLLM calls it through an instance or the class
        sig_now = ctx.surface.signature(now)
        if not isinstance(sig_now, Signature):
            return self.finding(tp, Status.UNKNOWN, f"signature of {target} unknown: {sig_now.reason}", where,
                                symbol=target)
        if ctx.written_for is None or not isinstance(then, Found):
            # Without the build it was written for, a different signature may be the consumer's design (a subclass
            # that also overrides the caller): only what vLLM changed since is checked.
            return self.finding(tp, Status.OK, f"{how} {replacement.patcher} replaces {target}, which this build "
                                "has (its parameters are compared only against the build it was written for)",
                                where, symbol=target)
        sig_then = ctx.written_for.signature(then)
        if not isinstance(sig_then, Signature):
            return self.finding(tp, Status.UNKNOWN, f"signature of {target} in the build written for unknown: "
                                f"{sig_then.reason}", where, symbol=target)
        if _takes_anything(sig_now) or _takes_anything(sig_then):
            return self.finding(tp, Status.OK, f"{how} {replacement.patcher} replaces {target}, whose signature "
                                f"{sig_now.render()} does not say what vLLM passes (not compared)", where,
                                symbol=target)
        refused_now, refused_then = refusals(mine, sig_now), refusals(mine, sig_then)
        new = [r for r in refused_now if r not in refused_then]
        evidence = Evidence(written_for=f"{target}{sig_then.render()}", audited=f"{target}{sig_now.render()}",
                            written_for_build=ctx.written_for.build.version,
                            extra=(("consumer", f"{replacement.patcher}{mine.render()}"),))
        if new:
            # What vLLM's callers may pass is a suspicion; the build's own calls of it say what they do pass.
            sites = vllm_calls(ctx, tp.attribute, sig_now, owner.path if owner.kind == FoundKind.CLASS else "",
                               override=replacement.how == PatchKind.SUBCLASS)
            failing = [(site, problems) for site, problems in sites.judged(mine) if problems]
            fix = f"give {replacement.patcher} the parameters of {target}{sig_now.render()}"
            if failing:
                site, problems = failing[0]
                return self.finding(
                    tp, Status.BROKEN, f"vLLM's {target} now takes {sig_now.render()} (was {sig_then.render()}); "
                    f"vLLM calls it at {site.at} ({site.code}), which {how} {replacement.patcher}{mine.render()} "
                    f"refuses: " + "; ".join(p.message for p in problems), where,
                    replace(evidence, extra=evidence.extra + (("vllm_calls", sites.render()),)), fix=fix,
                    symbol=target)
            maybe = [(site, problems) for site in sites.sites if site.maybe
                     for problems in [mine.bind(CallShape(site.positional, site.keywords + site.maybe), "it")]
                     if problems]
            if maybe:
                site, problems = maybe[0]
                return self.finding(
                    tp, Status.UNKNOWN, f"vLLM's {target} now takes {sig_now.render()} (was {sig_then.render()}); "
                    f"vLLM calls it at {site.at} ({site.code}) with {', '.join(site.maybe)} only when "
                    f"`{site.maybe_when}`, which {how} {replacement.patcher}{mine.render()} refuses: "
                    + "; ".join(p.message for p in problems) + "; what that test is at run time is not read",
                    where, replace(evidence, extra=evidence.extra + (("vllm_calls", sites.render()),)), fix=fix,
                    symbol=target)
            if not sites.sites and not sites.set_aside and sites.elsewhere and not sites.unknown:
                return self.finding(
                    tp, Status.OK, f"vLLM's {target} now takes {sig_now.render()} (was {sig_then.render()}); the "
                    f"build calls it only on other classes, which {how} {replacement.patcher} does not stand in for "
                    f"({', '.join(sites.elsewhere[:3])})", where, evidence, symbol=target)
            if not sites.sites and not sites.set_aside:
                # No call by name that shows its arguments (a forward called through the module or through
                # wrappers passing *args/**kwargs): vLLM's new signature is the evidence of what callers pass.
                return self.finding(
                    tp, Status.BROKEN, f"vLLM's {target} now takes {sig_now.render()} (was {sig_then.render()}); "
                    f"{how} {replacement.patcher}{mine.render()} refuses what vLLM's callers may now pass: "
                    + "; ".join(new) + f" (no call of it by name in the build shows what they pass{sites.unknown})",
                    where, evidence, fix=fix, symbol=target)
            return self.finding(
                tp, Status.OK, f"vLLM's {target} now takes {sig_now.render()} (was {sig_then.render()}); every call "
                f"of it in the build that reaches {how} {replacement.patcher} binds to it ({sites.render()})",
                where, evidence, symbol=target)
        return self.finding(tp, Status.OK, f"{how} {replacement.patcher} takes what vLLM's callers pass to "
                            f"{target}{sig_now.render()}", where, evidence, symbol=target)

    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        """A consumer subclass of a vLLM ``ABC`` that does not define an abstract method the build added since
        the build it was written for cannot be instantiated (``TypeError: Can't instantiate abstract class``)."""
        if ctx.written_for is None:
            return []
        findings = []
        for patch in ctx.scan.class_patches:
            if patch.kind != PatchKind.SUBCLASS:
                continue
            base = ctx.lookup(patch.target)
            then_base = ctx.lookup(patch.target, ctx.written_for)
            if not isinstance(base, Found) or not isinstance(then_base, Found) or base.kind != FoundKind.CLASS:
                continue
            now = set(ctx.fact(ABSTRACT_METHODS, base.path).methods) - set(patch.names)
            then = set(ctx.fact(ABSTRACT_METHODS, then_base.path, surface=ctx.written_for).methods) - set(patch.names)
            new = sorted(now - then)
            if new and not _completed_below(ctx, patch.patcher, set(new)):
                listed = ", ".join(new)
                findings.append(Finding(
                    self.name, Status.BROKEN, f"{base.path}:abstract", str(patch.location), str(base.location or "")
                    or None, f"{patch.patcher} cannot be instantiated in this build: {base.path} now declares "
                    f"abstract method(s) {listed}, which {patch.patcher} does not define (TypeError: Can't "
                    "instantiate abstract class)",
                    Evidence(written_for=f"abstract methods left to subclasses: {sorted(then) or 'none'}",
                             audited=f"abstract methods left to subclasses: {sorted(now)}",
                             written_for_build=ctx.written_for.build.version),
                    fix=f"define {listed} in {patch.patcher}", kind=FindingKind.PATCH, place=Place.at(patch.location),
                    touchpoint=f"{patch.target}:abstract"))
        return findings

    @staticmethod
    def _member(surface: Surface | None, owner_path: str, name: str):
        if surface is None:
            return None
        owner = surface.lookup(owner_path)
        return surface.member(owner, name) if isinstance(owner, Found) else owner


PROBE = PatchProbe(
    name="patch",
    description="The consumer's code in place of a vLLM name (patch-class methods, subclass overrides, "
                "assignments over vLLM's functions): the name still exists and vLLM's callers' arguments still "
                "bind to it.",
    kinds=(Kind.PATCH,),
    order=45,
)
