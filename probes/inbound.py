"""Inbound: how vLLM calls the consumer's classes it loads (platforms, workers, model runners, KV connectors and
managers, attention backends), read from the build's own calls and compared with the build written for.

- A hook the base leaves to subclasses (its body only raises ``NotImplementedError``, or it is abstract on a
  class ``ABCMeta`` does not enforce) that the build now calls and the consumer's class does not define fails
  when vLLM calls it.
- A worker method vLLM now sends by ``collective_rpc("m", args=..., kwargs=...)`` with arguments the
  consumer's method refuses fails in every worker. (Overrides of a method vLLM's own base defines are the
  ``patch`` probe's: it checks them against the build's calls the same way.)
- What vLLM now reads on the value an override returns (``t.language_model for t in compilation_times``) must
  be there: an override annotated to return a number, a string or None, or a vLLM class without it, fails.

Only what changed since the build written for is judged; the consumer's code worked there.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from compat.probes.rpc import RPC_WRAPPERS

from compat.consumer.result import ClassPatch, PatchKind
from compat.facts.abstract import FACT as INTERFACE
from compat.facts.abstract import HOOKS
from compat.facts.callers import FACT as CALLERS
from compat.facts.callers import SENT_RPCS, CallSite
from compat.facts.lineage import FACT as LINEAGE
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.probe import Probe, ProbeContext
from compat.probes import consequence
from compat.signature import CallShape, Signature
from compat.vllm.surface import Found, FoundKind, Missing, Surface

_SCALARS = {"float": "a float", "int": "an int", "bool": "a bool", "str": "a str", "None": "None",
            "bytes": "bytes"}
_WORKER_BASES = ("WorkerBase",)
_ENGINE = ("vllm/v1/engine/", "vllm/v1/executor/", "vllm/executor/", "vllm/engine/")
"""RPCs sent from here are the engine's own machinery; elsewhere (entry points, snapshots, RL routes) they are
sent when a user calls that feature."""


def _is_worker(ctx: ProbeContext, base: Found, surface: Surface) -> bool:
    return any(a.rsplit(".", 1)[-1] in _WORKER_BASES for a in ctx.fact(LINEAGE, base.path, surface=surface).ancestors)


class InboundProbe(Probe):
    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        if ctx.written_for is None:
            return []
        findings: list[Finding] = []
        for patch in ctx.scan.class_patches:
            if patch.kind != PatchKind.SUBCLASS:
                continue
            base = ctx.lookup(patch.target)
            then = ctx.lookup(patch.target, ctx.written_for)
            if not isinstance(base, Found) or base.kind != FoundKind.CLASS or not isinstance(then, Found):
                continue
            findings += self._hooks(ctx, patch, base, then)
            worker = _is_worker(ctx, base, ctx.surface)
            if worker:
                findings += self._unknown_rpcs(ctx, patch, base)
            for name in sorted(patch.names):
                mine = ctx.consumer_signature(f"{patch.patcher}.{name}")
                if mine is None:
                    continue
                findings += self._replies(ctx, patch, base, then, name, mine, worker)
                if worker:
                    findings += self._rpc_arguments(ctx, patch, base, name, mine)
        return findings

    def _hooks(self, ctx: ProbeContext, patch: ClassPatch, base: Found, then: Found) -> list[Finding]:
        assert ctx.written_for is not None  # run() judges nothing without it
        now_hooks = set(ctx.fact(HOOKS, base.path).methods)
        then_hooks = set(ctx.fact(HOOKS, then.path, surface=ctx.written_for).methods)
        found = []
        worker = _is_worker(ctx, base, ctx.surface)
        for name in sorted(now_hooks - set(patch.names)):
            if ctx.descendant_defining(patch.patcher, name) is not None:
                continue
            own = {f"{a}.{name}" for a in ctx.fact(LINEAGE, base.path).ancestors}  # the hook's own definitions
            judged = [(s, reaches(ctx, s, base.path, patch.names, worker)) for s in ctx.fact(CALLERS, name).sites
                      if s.function not in own and not s.handles_not_implemented]  # a caught raise is no failure
            general = [s for s, how in judged if how == Reach.CERTAIN and not _device_specific(s.at) and not s.guarded
                       and _opt_in(ctx, s) is None]
            sites = general or [s for s, how in judged if how]
            if not sites:
                continue  # left to subclasses, but vLLM does not call it on the consumer's objects
            certain = bool(general)
            sites_then = [s for s in ctx.fact(CALLERS, name, surface=ctx.written_for).sites
                          if s.function not in own]
            if name in then_hooks and sites_then:
                found += self._called_by_default(ctx, patch, base, name, sites)
                continue  # the consumer ran without it then, with the same hook called
            then_member = ctx.written_for.member(then, name)
            was = ("raised NotImplementedError there too, but vLLM did not call it" if name in then_hooks
                   else "was implemented there" if isinstance(then_member, Found) else "did not exist")
            owner = ctx.surface.member(base, name)
            message = (f"vLLM now calls {name} at {sites[0].at} ({sites[0].code}), which {base.path} leaves to its "
                       f"subclasses (it raises NotImplementedError or is abstract); {patch.patcher} does not define "
                       f"it, so the call fails (in the build written for it {was})")
            if not certain:
                reached = any(how == Reach.CERTAIN for _, how in judged)
                opt_in = next((o for s, how in judged if how == Reach.CERTAIN and (o := _opt_in(ctx, s))), None)
                why = (f"only when `{opt_in.condition}` ({opt_in.at}), {opt_in.decided}" if opt_in else
                       "on a path that runs only where a feature, platform, backend or kernel is selected" if reached
                       else f"on an object that may be a {patch.patcher} (its class there is not known)")
                message = (f"vLLM now calls {name} at {sites[0].at} ({sites[0].code}) {why}; {patch.patcher} does "
                           f"not define it, and {base.path} leaves it to its subclasses (in the build written for "
                           f"it {was})")
            found.append(Finding(
                self.name, Status.BROKEN if certain else Status.UNKNOWN, f"{base.path}:{name}",
                str(patch.location), ctx.where(owner), message,
                Evidence(written_for=f"{name}: {was}", audited=f"{name} left to subclasses, called at "
                         + ", ".join(s.at for s in sites[:4]), written_for_build=ctx.written_for.build.version),
                fix=f"define {name} in {patch.patcher} (see what vLLM's own subclasses of {base.path} do)",
                kind=FindingKind.PATCH, place=Place.at(patch.location), touchpoint=f"{patch.target}:{name}"))
        return found

    def _called_by_default(self, ctx: ProbeContext, patch: ClassPatch, base: Found, name: str,
                           sites: list[CallSite]) -> list[Finding]:
        """A hook the consumer leaves raising that vLLM called then too, but only under a test of its configs
        that this build's defaults now make true (async scheduling on by default -> ``sample_tokens``)."""
        assert ctx.written_for is not None
        for site in sites:
            platforms = consequence.turned_on(ctx, site.condition)
            if not platforms:
                continue
            where = "; ".join(f"on {p}: {why}" for p, why in platforms)
            message = (f"vLLM calls {name} at {site.at} ({site.code}) when `{site.condition}`, which this build's "
                       f"defaults make true ({where}); {patch.patcher} does not define {name} and {base.path} "
                       "leaves it to its subclasses (it raises NotImplementedError or is abstract), so the call "
                       "fails where the consumer did not turn that on itself")
            return [Finding(
                self.name, Status.BROKEN, f"{base.path}:{name}", str(patch.location), site.at, message,
                Evidence(written_for=f"{name} called only when `{site.condition}`, false by default",
                         audited=f"`{site.condition}` true by default ({', '.join(p for p, _ in platforms)})",
                         written_for_build=ctx.written_for.build.version,
                         extra=tuple((f"platform_{p.lower()}", why) for p, why in platforms)),
                fix=f"define {name} in {patch.patcher}, or turn off what the test reads where the consumer "
                    "configures vLLM", kind=FindingKind.PATCH, place=Place.at(patch.location),
                touchpoint=f"{patch.target}:{name}")]
        return []

    def _unknown_rpcs(self, ctx: ProbeContext, patch: ClassPatch, base: Found) -> list[Finding]:
        """Worker methods vLLM now sends by name that the consumer's worker does not have: not defined by it, by
        vLLM's base it extends, by the wrapper that receives RPCs, or by a worker extension (AttributeError in
        every worker when vLLM sends it)."""
        assert ctx.written_for is not None
        sent_then = set(ctx.fact(SENT_RPCS, surface=ctx.written_for).names)
        provided = set(patch.names) | {n for cls in ctx.scan.classes for n in cls.methods
                                      if cls.qualname in {e for e, _ in ctx.scan.worker_extensions}}
        wrappers = [w for w in (ctx.lookup(path) for path in RPC_WRAPPERS) if isinstance(w, Found)]
        found = []
        for name in ctx.fact(SENT_RPCS).names:
            if name in sent_then or name in provided or ctx.descendant_defining(patch.patcher, name) is not None or \
                    not isinstance(ctx.surface.member(base, name), Missing) or \
                    any(isinstance(ctx.surface.member(w, name), Found) for w in wrappers):
                continue
            sites = [s for s in ctx.fact(CALLERS, name).sites if s.rpc]
            engine = [s for s in sites if s.at.startswith(_ENGINE)]
            opt_ins = {s.at: o for s in engine if (o := _opt_in(ctx, s)) is not None}
            default = [s for s in engine if s.at not in opt_ins]
            where = (default or engine or sites)[0] if engine or sites else None
            opt_in = opt_ins.get(where.at) if where else None
            found.append(Finding(
                self.name, Status.BROKEN if default else Status.UNKNOWN, f"{patch.patcher}.{name}",
                str(patch.location), where.at if where else None,
                f"vLLM now sends {name} to every worker by name" + (f" at {where.at} (in {where.function})"
                                                                    if where else "")
                + f"; {patch.patcher} has no {name}, and neither has {base.path} it extends nor vLLM's worker "
                "wrapper, so the workers fail it (AttributeError)" + ("" if default else
                f"; it is sent only when `{opt_in.condition}` ({opt_in.at}), {opt_in.decided}" if opt_in else
                "; it is sent only outside the engine core and its executors (an optional entry point), so "
                "whether a run reaches it depends on what the user calls"),
                Evidence(written_for=f"{name} not sent", audited="sent at " + ", ".join(s.at for s in sites[:4]),
                         written_for_build=ctx.written_for.build.version),
                fix=f"define {name} in {patch.patcher} (see vLLM's own worker's {name})", kind=FindingKind.PATCH,
                place=Place.at(patch.location),
                touchpoint=f"{patch.target}:{name}"))
        return found

    def _rpc_arguments(self, ctx: ProbeContext, patch: ClassPatch, base: Found, name: str,
                       mine: Signature) -> list[Finding]:
        if isinstance(ctx.surface.member(base, name), Found):
            return []  # an override of the base's own method: the patch probe judges it against vLLM's calls
        own = mine.drop_first()
        then_shapes = {_shape(s) for s in ctx.fact(CALLERS, name, surface=ctx.written_for).sites if s.rpc}
        for site in ctx.fact(CALLERS, name).sites:
            if not site.rpc or site.unpacks or _shape(site) in then_shapes:
                continue
            problems = own.bind(_shape(site), name)
            if problems:
                return [Finding(
                    self.name, Status.BROKEN, f"{patch.patcher}.{name}", str(patch.location), site.at,
                    f"vLLM now sends {name} to every worker at {site.at} ({site.code}), which "
                    f"{patch.patcher}.{name}{own.render()} refuses: " + "; ".join(p.message for p in problems),
                    Evidence(written_for="vLLM's calls then: " + (", ".join(s.render() for s in then_shapes)
                                                                  or "none"),
                             audited=f"{site.at}: {_shape(site).render()}",
                             written_for_build=ctx.written_for.build.version if ctx.written_for else None),
                    fix=f"give {patch.patcher}.{name} the parameters vLLM passes", kind=FindingKind.PATCH,
                    place=Place.at(patch.location),
                    touchpoint=f"{patch.target}:{name}")]
        return []

    def _replies(self, ctx: ProbeContext, patch: ClassPatch, base: Found, then: Found, name: str,
                 mine: Signature, worker: bool) -> list[Finding]:
        if not isinstance(ctx.surface.member(base, name), Found):
            return []
        names = frozenset(patch.names)
        now_reads = _reads(ctx, name, base.path, names, worker, ctx.surface)
        then_reads = {attr for attr, _ in _reads(ctx, name, then.path, names, worker, ctx.written_for)}
        new = [(attr, site) for attr, site in now_reads if attr not in then_reads]
        if not new or mine.returns is None:
            return []
        returns = mine.returns.strip("'\"")
        attr, site = new[0]
        what = _SCALARS.get(returns)
        if what is None:
            declared = ctx.lookup(returns) if "." in returns else None
            if not isinstance(declared, Found) or declared.kind != FoundKind.CLASS or isinstance(
                    ctx.surface.member(declared, attr), Found):
                return []
            what = f"a {declared.path}, which has no '{attr}'"
        return [Finding(
            self.name, Status.BROKEN, f"{patch.patcher}.{name}", str(patch.location), site.at,
            f"vLLM now reads .{attr} on what {name} returns (at {site.at}: {site.code}); {patch.patcher}.{name} "
            f"returns {returns} ({what}), so vLLM's read fails (AttributeError)",
            Evidence(written_for=f"vLLM read {sorted(then_reads) or 'nothing'} on it",
                     audited=f"vLLM reads {sorted({a for a, _ in now_reads})} on it",
                     written_for_build=ctx.written_for.build.version if ctx.written_for else None),
            fix=f"return what vLLM's own {base.path}.{name} returns in this build", kind=FindingKind.PATCH,
            place=Place.at(patch.location),
            touchpoint=f"{patch.target}:{name}")]


_PLATFORM = consequence.PLATFORM


def _opt_in(ctx: ProbeContext, site: CallSite) -> consequence.OptIn | None:
    """The test of the build's configs that ``site`` runs only under, where the consumer's own platform decides
    it: the test around the call, or, for a call in a def the engine calls (an executor's ``extend_kv_cache``
    sending the RPC), the tests around every call of that def in the engine."""
    if site.condition:
        return consequence.platform_decides(ctx, site.condition, site.at)
    method = site.function.rpartition(".")[2]
    callers = [s for s in ctx.fact(CALLERS, method).sites if not s.rpc and s.function != site.function
               and s.at.startswith(_ENGINE)] if site.at.startswith(_ENGINE) else []
    found = [consequence.platform_decides(ctx, s.condition, s.at) for s in callers]
    return found[0] if callers and all(found) else None


class Reach(StrEnum):
    """Whether a call in the build reaches the consumer's class (``reaches``)."""

    CERTAIN = "certain"
    """It does: the object called is one of the consumer's class."""
    MAYBE = "maybe"
    """It may: other classes' objects may be there too."""
    NO = ""
    """It does not: the receiver is declared as an unrelated class."""


def reaches(ctx: ProbeContext, site: CallSite, base: str, names: frozenset[str] | set[str] | tuple[str, ...],
            worker: bool, surface: Surface | None = None) -> Reach:
    """Whether the build's call ``site`` calls the consumer's class (a subclass of ``base`` defining ``names``):
    certainly for an RPC to a worker, ``current_platform`` for a platform, a method of ``base``'s own lineage
    calling it on ``self`` where the consumer does not override that method, a receiver declared as ``base``
    itself; maybe where the receiver's class is not declared, or is declared as one of ``base``'s ancestors."""
    if site.rpc:
        return Reach.CERTAIN if worker else Reach.NO
    if not site.receiver:
        return Reach.MAYBE
    ancestors = ctx.fact(LINEAGE, base, surface=surface).ancestors
    if site.receiver == _PLATFORM and _PLATFORM in ancestors:
        return Reach.CERTAIN
    owner, _, method = site.function.rpartition(".")
    if site.receiver == owner and owner in ancestors:
        return Reach.NO if method in names else Reach.CERTAIN
    if site.receiver == base:
        # Declared as the very class the consumer extends: its object is one of them, unless that class is an
        # interface every implementation of which may be there.
        return Reach.MAYBE if ctx.fact(INTERFACE, base, surface=surface).interface else Reach.CERTAIN
    return Reach.MAYBE if site.receiver in ancestors else Reach.NO


_DEVICE_SPECIFIC = ("vllm/v1/attention/backends/", "vllm/attention/backends/", "vllm/platforms/", "triton", "cuda",
                    "rocm", "xpu", "tpu", "flashinfer", "aiter", "/kernels/", "/ops/", "compilation/passes/")
"""Code that runs only where its backend, kernel or device is selected (a platform plugin picks its own)."""


def _device_specific(at: str) -> bool:
    return any(marker in at.split(":")[0] for marker in _DEVICE_SPECIFIC)


def _shape(site: CallSite) -> CallShape:
    return CallShape(site.positional, site.keywords)


def _reads(ctx: ProbeContext, name: str, base: str, names: frozenset[str], worker: bool,
           surface: Surface | None) -> list[tuple[str, CallSite]]:
    """Attributes vLLM's calls of ``name`` that certainly reach the consumer's class read on its result."""
    found = []
    for site in ctx.fact(CALLERS, name, surface=surface).sites:
        if reaches(ctx, site, base, names, worker, surface) == Reach.CERTAIN:
            found += [(attr, site) for attr in site.reads]
    return found


PROBE = InboundProbe(
    name="inbound",
    description="How vLLM calls the consumer's classes it loads, from the build's own calls: hooks it now calls "
                "that the consumer's class lacks, RPCs its workers' methods refuse, attributes vLLM now reads on "
                "what an override returns.",
    kinds=(),
    order=46,
)
