"""What the walk of one consumer module found (``compat.consumer.visitor``), returned to the tree scan."""

from __future__ import annotations

from dataclasses import dataclass, field

from compat.consumer.result import ClassPatch, Guard, HeldStore, ImportGate, Ref, ReplyUse, TouchPoint
from compat.consumer.values import ClassAttributes
from compat.location import Location


@dataclass(frozen=True)
class ForwardReplacement:
    """``x.forward = types.MethodType(f, x)``: the consumer function ``f`` installed as a forward."""

    function: str
    location: Location
    target: Ref | None
    """The object whose forward is replaced, when the walk knows it."""
    code: str


@dataclass
class ModuleRecord:
    """Everything one walk of a module found, each thing once, in the order met."""

    touchpoints: list[TouchPoint] = field(default_factory=list)
    reply_uses: dict[Location, list[ReplyUse]] = field(default_factory=dict)
    """How the replies of worker RPCs are used, by the RPC's location (which may lie in another module)."""
    forwards: list[ForwardReplacement] = field(default_factory=list)
    attributes: ClassAttributes = field(default_factory=ClassAttributes)
    class_patches: list[ClassPatch] = field(default_factory=list)
    """What ``self.x = ...`` assignments in this module gave each class's attributes."""
    gates: list[ImportGate] = field(default_factory=list)
    """``raise`` statements the module's import runs under a test of the build."""
    helper_calls: list[tuple[str, tuple[Guard, ...]]] = field(default_factory=list)
    """Calls of the consumer's own defs (qualname) with the guards each runs under."""
    held_stores: list[HeldStore] = field(default_factory=list)
    """Attributes stored on ``<untyped>.<holder>`` (``vllm_config.scheduler_config._x = ...``, ``vllm_config: Any``)."""
    failures: list[tuple[Location, str, str]] = field(default_factory=list)
    """Top-level statements whose walk raised: where, ``Type: message``, the traceback (the rest was walked)."""
