"""What a probe is and what it gets to work with.

A probe never parses files: it receives the scan's touchpoints and a ``Surface`` and returns
findings. ``ProbeContext`` holds the shared helpers (class of an object the consumer built,
locations, the signature the consumer was written for) so that probe bodies stay short.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from compat.consumer.model import Kind, Ref, Scan, TouchPoint
from compat.facts import Fact
from compat.findings import Evidence, Finding, Status
from compat.vllm.surface import Found, Lookup, Surface, Unresolved

T = TypeVar("T")
DEFAULT_WORKER_CLASS = "vllm.v1.worker.gpu_worker.Worker"
DEFAULT_ARCHITECTURES = ("LlamaForCausalLM", "Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                         "KimiK25ForConditionalGeneration")


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
        surface = surface or self.surface
        key = ("lookup", id(surface), path)
        if key not in self._memo:
            self._memo[key] = surface.lookup(path)
        return self._memo[key]

    def class_of(self, ref: Ref, surface: Surface | None = None) -> Lookup:
        """The vLLM class (or module) of an object the consumer reached through ``ref``."""
        surface = surface or self.surface
        key = ("class_of", id(surface), ref)
        if key not in self._memo:
            self._memo[key] = self._class_of(ref, surface)
        return self._memo[key]

    def _class_of(self, ref: Ref, surface: Surface) -> Lookup:
        if ref.kind == "symbol":
            return self.lookup(ref.symbol or "", surface)
        if ref.kind == "worker":
            return self.lookup(self.worker_class, surface)
        if ref.kind == "attribute" and ref.base is not None and ref.name:
            owner = self.class_of(ref.base, surface)
            if not isinstance(owner, Found):
                return owner
            if owner.kind == "module":
                return surface.member(owner, ref.name)
            return surface.attribute_type(owner, ref.name)
        if ref.kind == "call" and ref.base is not None:
            callee = self.callee(ref.base, surface)
            if not isinstance(callee, Found):
                return callee
            return surface.result_type(callee)
        return Unresolved(f"cannot tell what {ref.render()} is")

    def callee(self, ref: Ref, surface: Surface | None = None) -> Lookup:
        """The vLLM callable that ``ref`` names (a class, a function, a method via its receiver)."""
        surface = surface or self.surface
        if ref.kind == "attribute" and ref.base is not None and ref.name:
            owner = self.class_of(ref.base, surface)
            if not isinstance(owner, Found):
                return owner
            return surface.member(owner, ref.name)
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
                       touchpoint=tp.symbol)
