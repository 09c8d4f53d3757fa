"""What a probe is and what it gets to work with.

A probe never parses files: it receives the scan's touchpoints and a ``Surface`` and returns
findings. ``ProbeContext`` holds the shared helpers (class of an object the consumer built,
locations, the signature the consumer was written for) so that probe bodies stay short.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from compat.consumer.model import ClassPatch, ConsumerClass, Kind, Ref, Scan, TouchPoint
from compat.facts import Fact
from compat.facts.lineage import FACT as LINEAGE
from compat.findings import Evidence, Finding, Place, Status
from compat.signature import Signature
from compat.vllm.surface import Found, Lookup, Missing, Surface, Unresolved

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


@dataclass(frozen=True)
class StandIn:
    """A consumer class whose instance may be what vLLM's code holds where a value of a vLLM class is declared:
    a subclass of that class (directly, through vLLM's own subclasses of it or through the consumer's), or a
    class the consumer assigns over it."""

    qualname: str
    how: str
    """``subclass`` or ``replacement``."""
    names: frozenset[str]
    """What the class and its consumer-side bases define (methods, class attributes, ``self.x`` stores)."""
    location: str

    def describe(self, declared: str) -> str:
        relation = "a subclass of" if self.how == "subclass" else "the consumer's replacement of"
        return f"{self.qualname} ({self.location}), {relation} {declared}"


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
    _memo: dict[Any, Any] = field(default_factory=dict)

    def touchpoints(self, kinds: Iterable[Kind]) -> list[TouchPoint]:
        wanted = set(kinds)
        return [tp for tp in self.scan.touchpoints if tp.kind in wanted]

    def lookup(self, path: str, surface: Surface | None = None) -> Lookup:
        """What ``path`` names in the build; a name the consumer sets on a vLLM module is ``ConsumerDefined``."""
        surface = surface or self.surface
        key = ("lookup", id(surface), path)
        if key not in self._memo:
            found = surface.lookup(path)
            if isinstance(found, Missing):
                found = self._added_path(path, surface) or found
            elif isinstance(found, Unresolved) and any(part in NOT_VLLM for part in path.split(".")[1:]):
                name = next(part for part in path.split(".")[1:] if part in NOT_VLLM)
                found = Unresolved(f"{path} is reached through {name}, {NOT_VLLM[name]}, not vLLM's", outside=True)
            self._memo[key] = found
        return self._memo[key]

    def member(self, owner: Found, name: str, surface: Surface | None = None) -> Lookup:
        """``owner.name`` in the build, or ``ConsumerDefined`` where the consumer defines it itself."""
        surface = surface or self.surface
        found = surface.member(owner, name)
        if isinstance(found, Missing):
            where = self.added(surface).get((owner.path, name))
            if where is not None:
                return ConsumerDefined(f"{owner.path}.{name}", where)  # type: ignore[return-value]
        return found

    def added(self, surface: Surface | None = None) -> dict[tuple[str, str], str]:
        """(vLLM class or module, name) -> where the consumer defines that name on it: attribute stores on vLLM
        objects, module attributes it sets, and what its patch classes copy onto their targets."""
        surface = surface or self.surface
        key = ("added", id(surface))
        if key not in self._memo:
            self._memo[key] = {}  # while it is computed, lookups see vLLM alone
            self._memo[("replaced", id(surface))] = {}
            added: dict[tuple[str, str], str] = {}
            replaced: dict[str, str] = {}
            for patch in self.scan.class_patches:
                target = self.lookup(patch.target, surface)
                if isinstance(target, Found):
                    for name in patch.names:
                        where = f"{patch.location} ({patch.patcher})"
                        if patch.kind == "replace" or (patch.kind == "patch" and self._vllms(patch.target, name)):
                            # vLLM's own name, whose code the consumer replaces: its calls run the consumer's.
                            own = surface.member(target, name)
                            if isinstance(own, Found):
                                replaced.setdefault(own.path, where)
                            if patch.kind == "replace":
                                added.setdefault((target.path, name), where)
                        elif not self._vllms(patch.target, name):
                            added.setdefault((target.path, name), where)
            for tp in self.scan.touchpoints:
                if tp.kind is Kind.ATTRIBUTE and tp.store and tp.receiver is not None and tp.attribute:
                    owner = self._class_of(tp.receiver, surface)
                    if isinstance(owner, Found) and not self._vllms(tp.receiver, tp.attribute):
                        added.setdefault((owner.path, tp.attribute), str(tp.location))
            self._memo[key] = added
            self._memo[("replaced", id(surface))] = replaced
            for stale in [k for k in self._memo if k[0] in ("lookup", "class_of") and k[1] == id(surface)]:
                del self._memo[stale]
        return self._memo[key]

    def stand_ins(self, declared: str, surface: Surface | None = None) -> tuple[StandIn, ...]:
        """The consumer's classes whose instances may stand where a value of the vLLM class ``declared`` is
        held: at run time the object may be one of them, so what they define may be there too."""
        surface = surface or self.surface
        key = ("stand_ins", id(surface), declared)
        if key not in self._memo:
            found: dict[str, StandIn] = {}
            for patch in self.scan.class_patches:
                if patch.kind == "subclass":
                    base = self.lookup(patch.target, surface)
                    if isinstance(base, Found) and base.kind == "class" and declared in self.fact(
                            LINEAGE, base.path, surface=surface).ancestors:
                        found.setdefault(patch.patcher, StandIn(patch.patcher, "subclass", frozenset(patch.names),
                                                                str(patch.location)))
                elif patch.kind == "replace" and len(patch.names) == 1:
                    owner = self.lookup(patch.target, surface)
                    if isinstance(owner, Found) and f"{owner.path}.{patch.names[0]}" == declared:
                        names = self._class_names(patch.patcher)
                        if names is not None:
                            found.setdefault(patch.patcher, StandIn(patch.patcher, "replacement", names,
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
            self._memo[key] = tuple(found.values())
        return self._memo[key]

    def stand_in_defining(self, declared: str, name: str, surface: Surface | None = None) -> StandIn | None:
        """The first of ``stand_ins(declared)`` that defines ``name``."""
        return next((s for s in self.stand_ins(declared, surface) if name in s.names), None)

    def consumer_signature(self, qualname: str) -> Signature | None:
        """The parameters of the consumer's method ``qualname`` (``self`` included), where the scan read them."""
        if "signatures" not in self._memo:
            self._memo["signatures"] = {tp.replacement.patcher: tp.replacement.signature for tp in self.scan.touchpoints
                                        if tp.replacement is not None and tp.replacement.signature is not None}
        return self._memo["signatures"].get(qualname)

    def own_subclass(self, tp: TouchPoint) -> ClassPatch | None:
        """The consumer's subclass of a vLLM class whose method holds ``tp`` (through ``self``): there the object
        is an instance of that class or of the consumer's own subclasses of it, not of an unknown implementation
        of the vLLM class. None for a patch class (whose ``self`` is vLLM's object) and outside methods."""
        if tp.receiver is None or tp.receiver.kind != "self" or not tp.context:
            return None
        if "subclasses" not in self._memo:
            self._memo["subclasses"] = {p.patcher: p for p in self.scan.class_patches if p.kind == "subclass"}
        parts = tp.context.split(".")
        for end in range(len(parts) - 1, 0, -1):
            found = self._memo["subclasses"].get(".".join(parts[:end]))
            if found is not None:
                return found
        return None

    def subclasses(self, qualname: str) -> list[ConsumerClass]:
        """The consumer's classes that name the consumer's class ``qualname`` as a base."""
        if "children" not in self._memo:
            children: dict[str, list[ConsumerClass]] = {}
            for cls in self.scan.classes:
                for base in cls.bases:
                    children.setdefault(base, []).append(cls)
            self._memo["children"] = children
        return self._memo["children"].get(qualname, [])

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
            if patch.patcher == qualname and patch.kind == "subclass":
                return frozenset(patch.names)
        cls = self.consumer_class(qualname)
        return frozenset(cls.methods) if cls is not None else None

    def consumer_class(self, qualname: str) -> ConsumerClass | None:
        """The consumer's class ``qualname``, as the scan recorded it."""
        if "classes" not in self._memo:
            self._memo["classes"] = {c.qualname: c for c in self.scan.classes}
        return self._memo["classes"].get(qualname)

    def replaced(self, path: str, surface: Surface | None = None) -> str | None:
        """Where the consumer replaces vLLM's ``path`` (a function, a class, a method) with its own code, if it
        does: calls of it run the consumer's code, so vLLM's signature is not what they must bind to."""
        surface = surface or self.surface
        self.added(surface)
        return self._memo[("replaced", id(surface))].get(path)

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

    def class_of(self, ref: Ref, surface: Surface | None = None) -> Lookup:
        """The vLLM class (or module) of an object the consumer reached through ``ref``."""
        surface = surface or self.surface
        key = ("class_of", id(surface), ref)
        if key not in self._memo:
            self._memo[key] = self._class_of(ref, surface)
        return self._memo[key]

    def _class_of(self, ref: Ref, surface: Surface) -> Lookup:
        if ref.kind == "attribute" and ref.name in NOT_VLLM:
            return Unresolved(f"{ref.render()} is {NOT_VLLM[ref.name]}, not vLLM's", outside=True)
        if ref.kind == "symbol":
            found = self.lookup(ref.symbol or "", surface)
            if isinstance(found, Found) and found.kind == "attribute":
                # A module-level variable (``parallel_state._TP``): the class its annotation or value gives.
                module = self.lookup(found.path.rpartition(".")[0], surface)
                if isinstance(module, Found) and module.kind == "module":
                    typed = surface.attribute_type(module, found.path.rpartition(".")[2])
                    return typed if isinstance(typed, Found) or getattr(typed, "outside", False) else found
            if isinstance(found, Missing) and ref.typing:
                return Unresolved(f"{ref.symbol} is named only for type checking (an import under TYPE_CHECKING) "
                                  f"and is not in this build: {found.reason}")
            return found
        if ref.kind == "worker":
            return self.lookup(self.worker_class, surface)
        if ref.kind == "self":
            return self.lookup(ref.symbol or "", surface)
        if ref.kind == "attribute" and ref.base is not None and ref.name:
            owner = self.class_of(ref.base, surface)
            if not isinstance(owner, Found):
                return owner
            if owner.kind == "module":
                return self.member(owner, ref.name, surface)
            found = surface.attribute_type(owner, ref.name)
            if isinstance(found, Missing):
                member = self.member(owner, ref.name, surface)
                return member if isinstance(member, ConsumerDefined) else found
            return found
        if ref.kind == "call" and ref.base is not None:
            callee = self.callee(ref.base, surface)
            if not isinstance(callee, Found):
                return callee
            through = self.class_of(ref.base.base, surface) if ref.base.kind == "attribute" and ref.base.base \
                else None
            return surface.result_type(callee, through if isinstance(through, Found) else None)
        return Unresolved(f"cannot tell what {ref.render()} is")

    def callee(self, ref: Ref, surface: Surface | None = None) -> Lookup:
        """The vLLM callable that ``ref`` names (a class, a function, a method via its receiver)."""
        surface = surface or self.surface
        if ref.kind == "attribute" and ref.base is not None and ref.name:
            owner = self.class_of(ref.base, surface)
            if not isinstance(owner, Found):
                return owner
            return self.member(owner, ref.name, surface)
        return self.class_of(ref, surface)

    def fact(self, fact: Fact[T], *inputs: Any, surface: Surface | None = None) -> T:
        """A fact about the build's code (see ``compat.facts``), read once per build and inputs."""
        surface = surface or self.surface
        memo = ("fact", id(surface), fact.key(inputs))
        if memo not in self._memo:
            self._memo[memo] = surface.fact(fact, *inputs)
        return self._memo[memo]

    @staticmethod
    def where(found: Lookup | None) -> str | None:
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
                       evidence=evidence or Evidence(), fix=fix, kind=tp.kind.value, code=tp.code or None,
                       touchpoint=tp.symbol, place=Place.at(tp.location))
