"""What a probe is and what it gets to work with.

A probe never parses files: it receives the scan's touchpoints and a ``Surface`` and returns
findings. ``ProbeContext`` holds the shared helpers (class of an object the consumer built,
locations, the signature the consumer was written for) so that probe bodies stay short.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, TypeVar, cast

from compat.consumer.guards import GuardExpr, HasAttr, HasParam, Imports
from compat.consumer.result import ClassPatch, ConsumerClass, Kind, PatchKind, Ref, RefKind, Scan, TouchPoint
from compat.facts import Fact
from compat.facts.lineage import FACT as LINEAGE
from compat.findings import Evidence, Finding, FindingKind, Place, Status
from compat.signature import Signature
from compat.vllm.surface import Found, FoundKind, Lookup, Missing, Surface, Unresolved

T = TypeVar("T")
DEFAULT_WORKER_CLASS = "vllm.v1.worker.gpu_worker.Worker"
DEFAULT_ARCHITECTURES = ("LlamaForCausalLM", "Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                         "KimiK25ForConditionalGeneration")


NOT_VLLM = {"hf_config": "Hugging Face's model config", "hf_text_config": "Hugging Face's model config",
            "hf_image_processor_config": "Hugging Face's processor config", "logger": "a logging.Logger"}
"""Attributes of vLLM objects and modules that hold other libraries' objects: what the consumer does with them
is not a vLLM touchpoint."""


@dataclass(frozen=True)
class ConsumerDefined:
    """What the consumer itself defines on a vLLM class or module (a store, a patch class, a module attribute):
    not vLLM's, so there is nothing of vLLM's to check, and what it holds is the consumer's own object."""

    path: str
    location: str

    @property
    def reason(self) -> str:
        return f"{self.path} is defined by the consumer at {self.location}, not by vLLM"


class StandInHow(StrEnum):
    """How a consumer class comes to stand where a vLLM class is declared (``StandIn.how``)."""

    SUBCLASS = "subclass"
    """It extends the declared class."""
    REPLACEMENT = "replacement"
    """The consumer assigns it over the declared class."""


Answer = Lookup | ConsumerDefined
"""What the context answers for a name or an object: the build's reading of it, or the consumer's own definition."""


@dataclass(frozen=True)
class StandIn:
    """A consumer class whose instance may be what vLLM's code holds where a value of a vLLM class is declared:
    a subclass of that class (directly, through vLLM's own subclasses of it or through the consumer's), or a
    class the consumer assigns over it."""

    qualname: str
    how: StandInHow
    names: frozenset[str]
    """What the class and its consumer-side bases define (methods, class attributes, ``self.x`` stores)."""
    location: str

    def describe(self, declared: str) -> str:
        relation = "a subclass of" if self.how == StandInHow.SUBCLASS else "the consumer's replacement of"
        return f"{self.qualname} ({self.location}), {relation} {declared}"


@dataclass
class Answers:
    """What ``lookup`` and ``class_of`` answered for one surface, under one view of the consumer's additions."""

    paths: dict[str, Answer] = field(default_factory=dict)
    """``lookup``: dotted path -> what it names."""
    classes: dict[Ref, Answer] = field(default_factory=dict)
    """``class_of``: how the consumer reached an object -> its vLLM class."""


@dataclass(frozen=True)
class Additions:
    """What the consumer adds to one build's vLLM objects (``ProbeContext.added``) and what it replaces there."""

    added: dict[tuple[str, str], str] = field(default_factory=dict)
    """(vLLM class or module, name) -> where the consumer defines that name on it."""
    replaced: dict[str, str] = field(default_factory=dict)
    """vLLM's path -> where the consumer replaces it with its own code."""


@dataclass
class SurfaceMemo:
    """What a ``ProbeContext`` worked out about one surface. Holding the surface keeps its identity (the memo's
    key) from passing to another object."""

    surface: Surface
    alone: Answers = field(default_factory=Answers)
    """Answers given while the consumer's additions are worked out: of vLLM alone (read only then)."""
    full: Answers = field(default_factory=Answers)
    """Answers given otherwise: with the consumer's additions, worked out first where an answer needs them."""
    additions: Additions | None = None
    """None until worked out."""
    adding: bool = False
    """The additions are being worked out: lookups see vLLM alone."""
    stand_ins: dict[str, tuple[StandIn, ...]] = field(default_factory=dict)
    """``stand_ins``: the declared vLLM class -> the consumer's classes that may stand there."""
    facts: dict[str, object] = field(default_factory=dict)
    """``fact``: the fact's key (its name and inputs) -> its answer."""

    @property
    def answers(self) -> Answers:
        return self.alone if self.adding else self.full


def _held_classes(surface: Surface) -> dict[str, Found]:
    """The names vLLM holds its configs under (``scheduler_config``) -> the config class, read from the build."""
    from compat.facts.reach import config_classes
    from compat.vllm.static import static_reading

    static = static_reading(surface)
    if static is None:
        return {}
    found = {name: surface.lookup(path) for name, path in config_classes(static).items()}
    return {name: cls for name, cls in found.items() if isinstance(cls, Found) and cls.kind == FoundKind.CLASS}


@dataclass
class ProbeContext:
    scan: Scan
    surface: Surface
    written_for: Surface | None = None
    worker_class: str = DEFAULT_WORKER_CLASS
    architectures: tuple[str, ...] = DEFAULT_ARCHITECTURES
    confirm: bool = False
    """Run the runtime confirmation (installed vLLM only)."""
    confirm_timeout: float = 300.0
    _surfaces: dict[int, SurfaceMemo] = field(default_factory=dict)
    """What was worked out about each surface asked about, by the surface's identity."""

    def _of(self, surface: Surface) -> SurfaceMemo:
        memo = self._surfaces.get(id(surface))
        if memo is None:
            memo = self._surfaces[id(surface)] = SurfaceMemo(surface)
        return memo

    def touchpoints(self, kinds: Iterable[Kind]) -> list[TouchPoint]:
        wanted = set(kinds)
        return [tp for tp in self.scan.touchpoints if tp.kind in wanted]

    def lookup(self, path: str, surface: Surface | None = None) -> Answer:
        """What ``path`` names in the build; a name the consumer sets on a vLLM module is ``ConsumerDefined``."""
        surface = surface or self.surface
        known = self._of(surface).answers.paths
        if path not in known:
            found: Answer = surface.lookup(path)
            dunder = next((part for part in path.split(".")[1:-1] if part.startswith("__") and part.endswith("__")),
                          None)
            if isinstance(found, Missing):
                found = self._added_path(path, surface) or found
            if isinstance(found, Missing) and dunder is not None:
                # ``SpeculativeConfig.__pydantic_decorators__.model_validators``: made by Python or a library
                found = Unresolved(f"{path} is reached through {dunder}, Python's or a library's, not vLLM's",
                                   outside=True)
            elif isinstance(found, Unresolved) and any(part in NOT_VLLM for part in path.split(".")[1:]):
                name = next(part for part in path.split(".")[1:] if part in NOT_VLLM)
                found = Unresolved(f"{path} is reached through {name}, {NOT_VLLM[name]}, not vLLM's", outside=True)
            # Reading it may have made the additions known: it is kept under the view that is current now.
            self._of(surface).answers.paths[path] = found
            return found
        return known[path]

    def member(self, owner: Found, name: str, surface: Surface | None = None) -> Answer:
        """``owner.name`` in the build, or ``ConsumerDefined`` where the consumer defines it itself."""
        surface = surface or self.surface
        found = surface.member(owner, name)
        if isinstance(found, Missing):
            where = self.added(surface).get((owner.path, name))
            if where is not None:
                return ConsumerDefined(f"{owner.path}.{name}", where)
        return found

    def added(self, surface: Surface | None = None) -> dict[tuple[str, str], str]:
        """(vLLM class or module, name) -> where the consumer defines that name on it: attribute stores on vLLM
        objects, module attributes it sets, and what its patch classes copy onto their targets."""
        return self._additions(surface or self.surface).added

    def _additions(self, surface: Surface) -> Additions:
        memo = self._of(surface)
        if memo.adding:
            return Additions()  # while they are worked out, lookups see vLLM alone
        if memo.additions is None:
            memo.adding = True
            try:
                memo.additions = self._read_additions(surface)
            finally:
                memo.adding = False
        return memo.additions

    def _read_additions(self, surface: Surface) -> Additions:
        added: dict[tuple[str, str], str] = {}
        replaced: dict[str, str] = {}
        for patch in self.scan.class_patches:
            target = self.lookup(patch.target, surface)
            if isinstance(target, Found):
                for name in patch.names:
                    where = f"{patch.location} ({patch.patcher})"
                    if patch.kind == PatchKind.REPLACE or (patch.kind == PatchKind.PATCH
                                                           and self._vllms(patch.target, name)):
                        # vLLM's own name, whose code the consumer replaces: its calls run the consumer's.
                        own = surface.member(target, name)
                        if isinstance(own, Found) and not patch.wraps:  # a wrapper may still run vLLM's code
                            replaced.setdefault(own.path, where)
                        if patch.kind == PatchKind.REPLACE:
                            added.setdefault((target.path, name), where)
                    elif not self._vllms(patch.target, name):
                        added.setdefault((target.path, name), where)
        for tp in self.scan.touchpoints:
            if tp.kind is Kind.ATTRIBUTE and tp.store and tp.receiver is not None and tp.attribute:
                owner = self._class_of(tp.receiver, surface)
                if isinstance(owner, Found) and not self._vllms(tp.receiver, tp.attribute):
                    added.setdefault((owner.path, tp.attribute), str(tp.location))
        if self.scan.held_stores:
            held = _held_classes(surface)
            for store in self.scan.held_stores:
                # ``vllm_config.scheduler_config._x = ...`` on an untyped ``vllm_config``: ``scheduler_config`` is
                # the name vLLM holds its SchedulerConfig under, so the consumer sets ``_x`` on those objects.
                cls = held.get(store.holder)
                if cls is not None and not isinstance(surface.member(cls, store.name), Found):
                    added.setdefault((cls.path, store.name), str(store.location))
        return Additions(added, replaced)

    def stand_ins(self, declared: str, surface: Surface | None = None) -> tuple[StandIn, ...]:
        """The consumer's classes whose instances may stand where a value of the vLLM class ``declared`` is
        held: at run time the object may be one of them, so what they define may be there too."""
        surface = surface or self.surface
        known = self._of(surface).stand_ins
        if declared not in known:
            known[declared] = self._read_stand_ins(declared, surface)
        return known[declared]

    def _read_stand_ins(self, declared: str, surface: Surface) -> tuple[StandIn, ...]:
        found: dict[str, StandIn] = {}
        for patch in self.scan.class_patches:
            if patch.kind == PatchKind.SUBCLASS:
                base = self.lookup(patch.target, surface)
                if isinstance(base, Found) and base.kind == FoundKind.CLASS and declared in self.fact(
                        LINEAGE, base.path, surface=surface).ancestors:
                    found.setdefault(patch.patcher, StandIn(patch.patcher, StandInHow.SUBCLASS,
                                                            frozenset(patch.names), str(patch.location)))
            elif patch.kind == PatchKind.REPLACE and len(patch.names) == 1:
                owner = self.lookup(patch.target, surface)
                if isinstance(owner, Found) and f"{owner.path}.{patch.names[0]}" == declared:
                    names = self._class_names(patch.patcher)
                    if names is not None:
                        found.setdefault(patch.patcher, StandIn(patch.patcher, StandInHow.REPLACEMENT, names,
                                                                str(patch.location)))
        stack = list(found.values())
        while stack:  # the consumer's own subclasses of those
            parent = stack.pop()
            for cls in self.subclasses(parent.qualname):
                if cls.qualname not in found:
                    child = StandIn(cls.qualname, parent.how, parent.names | frozenset(cls.methods),
                                    str(cls.location))
                    found[cls.qualname] = child
                    stack.append(child)
        return tuple(found.values())

    def stand_in_defining(self, declared: str, name: str, surface: Surface | None = None) -> StandIn | None:
        """The first of ``stand_ins(declared)`` that defines ``name``."""
        return next((s for s in self.stand_ins(declared, surface) if name in s.names), None)

    def consumer_signature(self, qualname: str) -> Signature | None:
        """The parameters of the consumer's method ``qualname`` (``self`` included), where the scan read them."""
        return self._signatures.get(qualname)

    @cached_property
    def _signatures(self) -> dict[str, Signature]:
        """The consumer's replacement defs (qualname) -> their parameters as written."""
        return {tp.replacement.patcher: tp.replacement.signature for tp in self.scan.touchpoints
                if tp.replacement is not None and tp.replacement.signature is not None}

    def own_subclass(self, tp: TouchPoint) -> ClassPatch | None:
        """The consumer's subclass of a vLLM class whose method holds ``tp`` (through ``self``): there the object
        is an instance of that class or of the consumer's own subclasses of it, not of an unknown implementation
        of the vLLM class. None for a patch class (whose ``self`` is vLLM's object) and outside methods."""
        if tp.receiver is None or tp.receiver.kind != RefKind.SELF or not tp.context:
            return None
        parts = tp.context.split(".")
        for end in range(len(parts) - 1, 0, -1):
            found = self._own_subclasses.get(".".join(parts[:end]))
            if found is not None:
                return found
        return None

    def vllm_may_call(self, qualname: str) -> bool:
        """The consumer's method ``qualname`` has a name vLLM's class its class extends defines: vLLM's own code
        may call it, so what holds where the consumer calls it says nothing of those calls."""
        owner, _, name = qualname.rpartition(".")
        patch = self._own_subclasses.get(owner)
        base = self.lookup(patch.target) if patch is not None else None
        return isinstance(base, Found) and not isinstance(self.surface.member(base, name), Missing)

    def guard_lookup(self, expr: GuardExpr) -> bool | None:
        """What the build says of a guard's leaf that needs its code (``compat.consumer.guards.BuildQuery``):
        ``hasattr`` on a vLLM object, a parameter of a vLLM callable, an import of vLLM names. True, False, or None
        (cannot tell)."""

        def known(result: Answer) -> bool | None:
            return True if isinstance(result, Found) else (False if isinstance(result, Missing) else None)

        if isinstance(expr, HasAttr):
            owner = self.lookup(expr.symbol)
            member = self.surface.member(owner, expr.name) if isinstance(owner, Found) else owner
            present = known(member)
            if present is False and expr.instance:
                return None  # an instance may be given it at run time
            if present is False and isinstance(owner, Found) and (owner.path, expr.name) in self.added():
                return None  # the consumer sets it there itself: which of its modules ran first decides
            if present is True and expr.not_none and not (isinstance(member, Found) and member.kind in (
                    FoundKind.FUNCTION, FoundKind.CLASS, FoundKind.METHOD, FoundKind.CLASSMETHOD,
                    FoundKind.STATICMETHOD, FoundKind.MODULE)):
                return None  # present, but may hold None
            return present
        if isinstance(expr, HasParam):
            found = self.lookup(expr.symbol)
            signature = self.surface.signature(found) if isinstance(found, Found) else None
            if not isinstance(signature, Signature):
                return None
            return any(param.name == expr.name for param in signature.parameters)
        if isinstance(expr, Imports):
            results = [known(self.lookup(s)) for s in expr.symbols]
            if all(r is True for r in results):
                return True
            return False if any(r is False for r in results) else None
        return None

    def vllm_calls(self, tp: TouchPoint) -> str | None:
        """The vLLM method that the consumer method holding ``tp`` overrides (``MyWorker.execute_model`` over
        ``Worker.execute_model``): vLLM's own code calls it there, so what drives it (the engine loop) is vLLM's.
        None outside such an override."""
        if not tp.context or "." not in tp.context:
            return None
        cls_name, _, method = tp.context.rpartition(".")
        cls = self.consumer_class(cls_name)
        if cls is None:
            return None
        for base in cls.bases:
            owner = self.lookup(base)
            member = self.member(owner, method) if isinstance(owner, Found) else None
            if isinstance(member, Found):
                return member.path
        return None

    @cached_property
    def _own_subclasses(self) -> dict[str, ClassPatch]:
        """The consumer's subclasses of vLLM classes, by qualname."""
        return {p.patcher: p for p in self.scan.class_patches if p.kind == PatchKind.SUBCLASS}

    def subclasses(self, qualname: str) -> list[ConsumerClass]:
        """The consumer's classes that name the consumer's class ``qualname`` as a base."""
        return self._children.get(qualname, [])

    @cached_property
    def _children(self) -> dict[str, list[ConsumerClass]]:
        """A consumer class's qualname (as its subclasses name it) -> those subclasses."""
        children: dict[str, list[ConsumerClass]] = {}
        for cls in self.scan.classes:
            for base in cls.bases:
                children.setdefault(base, []).append(cls)
        return children

    def descendants(self, qualname: str) -> list[ConsumerClass]:
        """Every consumer class deriving from the consumer's class ``qualname``, directly or not."""
        stack, found = list(self.subclasses(qualname)), {}
        while stack:
            cls = stack.pop()
            if cls.qualname not in found:
                found[cls.qualname] = cls
                stack.extend(self.subclasses(cls.qualname))
        return list(found.values())

    def descendant_defining(self, qualname: str, name: str) -> str | None:
        """A consumer class deriving from the consumer's class ``qualname`` that defines ``name``."""
        for cls in self.descendants(qualname):
            if name in cls.methods or name in (self._class_names(cls.qualname) or ()):
                return f"{cls.qualname} ({cls.location})"
        return None

    def _class_names(self, qualname: str) -> frozenset[str] | None:
        for patch in self.scan.class_patches:
            if patch.patcher == qualname and patch.kind == PatchKind.SUBCLASS:
                return frozenset(patch.names)
        cls = self.consumer_class(qualname)
        return frozenset(cls.methods) if cls is not None else None

    def consumer_class(self, qualname: str) -> ConsumerClass | None:
        """The consumer's class ``qualname``, as the scan recorded it."""
        return self._classes.get(qualname)

    @cached_property
    def _classes(self) -> dict[str, ConsumerClass]:
        return {c.qualname: c for c in self.scan.classes}

    @cached_property
    def _read_names(self) -> frozenset[str]:
        return frozenset(tp.symbol for tp in self.scan.touchpoints
                         if (tp.kind is Kind.ATTRIBUTE and not tp.store) or tp.kind is Kind.CALL)

    def reads_original(self, path: str) -> bool:
        """The consumer reads vLLM's ``path`` as a value or calls it (``_orig_m = Cls.m``, ``wrap(Cls.m)``,
        ``_orig_f(...)``): where it replaces it, vLLM's code may still run."""
        return path in self._read_names

    def replaced(self, path: str, surface: Surface | None = None) -> str | None:
        """Where the consumer replaces vLLM's ``path`` (a function, a class, a method) with its own code, if it
        does: calls of it run the consumer's code, so vLLM's signature is not what they must bind to."""
        return self._additions(surface or self.surface).replaced.get(path)

    def _vllms(self, target: Ref | str, name: str) -> bool:
        """``name`` is vLLM's own on ``target`` in the build the consumer was written for: the consumer sets or
        replaces it there, it does not add it (so vLLM dropping it since is a breakage, not the consumer's)."""
        if self.written_for is None:
            return False
        owner = self.lookup(target, self.written_for) if isinstance(target, str) else self._class_of(
            target, self.written_for)
        return isinstance(owner, Found) and isinstance(self.written_for.member(owner, name), Found)

    def _added_path(self, path: str, surface: Surface) -> ConsumerDefined | None:
        parts = path.split(".")
        added = self.added(surface)
        for i in range(len(parts) - 1, 0, -1):
            where = added.get((".".join(parts[:i]), parts[i]))
            if where is not None:
                return ConsumerDefined(".".join(parts[:i + 1]), where)
        return None

    def class_of(self, ref: Ref, surface: Surface | None = None) -> Answer:
        """The vLLM class (or module) of an object the consumer reached through ``ref``."""
        surface = surface or self.surface
        known = self._of(surface).answers.classes
        if ref not in known:
            found = self._class_of(ref, surface)
            self._of(surface).answers.classes[ref] = found
            return found
        return known[ref]

    def _class_of(self, ref: Ref, surface: Surface) -> Answer:
        if ref.kind == RefKind.ATTRIBUTE and ref.name in NOT_VLLM:
            return Unresolved(f"{ref.render()} is {NOT_VLLM[ref.name]}, not vLLM's", outside=True)
        if ref.kind == RefKind.SYMBOL:
            found = self.lookup(ref.symbol or "", surface)
            if isinstance(found, Found) and found.kind == FoundKind.ATTRIBUTE:
                # A module-level variable (``parallel_state._TP``): the class its annotation or value gives.
                module = self.lookup(found.path.rpartition(".")[0], surface)
                if isinstance(module, Found) and module.kind == FoundKind.MODULE:
                    typed = surface.attribute_type(module, found.path.rpartition(".")[2])
                    return typed if isinstance(typed, Found) or getattr(typed, "outside", False) else found
            if isinstance(found, Missing) and ref.typing:
                return Unresolved(f"{ref.symbol} is named only for type checking (an import under TYPE_CHECKING) "
                                  f"and is not in this build: {found.reason}")
            return found
        if ref.kind == RefKind.WORKER:
            return self.lookup(self.worker_class, surface)
        if ref.kind == RefKind.SELF:
            return self.lookup(ref.symbol or "", surface)
        if ref.kind == RefKind.ATTRIBUTE and ref.base is not None and ref.name:
            owner = self.class_of(ref.base, surface)
            if not isinstance(owner, Found):
                return owner
            if owner.kind == FoundKind.MODULE:
                return self.member(owner, ref.name, surface)
            found = surface.attribute_type(owner, ref.name)
            if isinstance(found, Missing):
                member = self.member(owner, ref.name, surface)
                return member if isinstance(member, ConsumerDefined) else found
            return found
        if ref.kind == RefKind.CALL and ref.base is not None:
            callee = self.callee(ref.base, surface)
            if not isinstance(callee, Found):
                return callee
            through = self.class_of(ref.base.base, surface) if ref.base.kind == RefKind.ATTRIBUTE and ref.base.base \
                else None
            return surface.result_type(callee, through if isinstance(through, Found) else None)
        return Unresolved(f"cannot tell what {ref.render()} is")

    def callee(self, ref: Ref, surface: Surface | None = None) -> Answer:
        """The vLLM callable that ``ref`` names (a class, a function, a method via its receiver)."""
        surface = surface or self.surface
        if ref.kind == RefKind.ATTRIBUTE and ref.base is not None and ref.name:
            owner = self.class_of(ref.base, surface)
            if not isinstance(owner, Found):
                return owner
            return self.member(owner, ref.name, surface)
        return self.class_of(ref, surface)

    def fact(self, fact: Fact[T], *inputs: Any, surface: Surface | None = None) -> T:
        """A fact about the build's code (see ``compat.facts``), read once per build and inputs."""
        surface = surface or self.surface
        known = self._of(surface).facts
        key = fact.key(inputs)
        if key not in known:
            known[key] = surface.fact(fact, *inputs)
        return cast(T, known[key])

    @staticmethod
    def where(found: Answer | None) -> str | None:
        if isinstance(found, Found) and found.location is not None:
            return str(found.location)
        return None

    @property
    def version(self) -> str | None:
        return self.surface.build.version


@dataclass(frozen=True)
class Probe:
    """A named check. ``check`` judges one touchpoint; ``run`` judges the build as a whole."""

    name: str
    description: str
    kinds: tuple[Kind, ...] = ()
    order: int = 50

    def applies(self, tp: TouchPoint) -> bool:
        return tp.kind in self.kinds

    def check(self, ctx: ProbeContext, tp: TouchPoint) -> Finding | None:
        return None

    def run(self, ctx: ProbeContext) -> Iterable[Finding]:
        return ()

    def finding(self, tp: TouchPoint, status: Status, message: str, vllm_location: str | None = None,
                evidence: Evidence | None = None, fix: str | None = None, symbol: str | None = None) -> Finding:
        return Finding(check=self.name, status=status, symbol=symbol or tp.symbol,
                       consumer_location=str(tp.location), vllm_location=vllm_location, message=message,
                       evidence=evidence or Evidence(), fix=fix, kind=FindingKind(tp.kind.value), code=tp.code or None,
                       touchpoint=tp.symbol, place=Place.at(tp.location))
