"""What the consumer scan knows about a value while it walks the code (see ``compat.consumer.scan``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from compat.consumer.guards import GuardExpr, VersionForm
from compat.consumer.names import FunctionNames
from compat.consumer.result import Ref
from compat.location import Location


@dataclass(frozen=True)
class Sym:
    """A vLLM object named by its dotted path (module, class, function...)."""

    path: str


@dataclass(frozen=True)
class Obj:
    """An object of the target whose class the probes work out from ``ref``."""

    ref: Ref


@dataclass(frozen=True)
class SelfOf:
    """``self`` inside a consumer class (``worker``: the class extends vLLM's worker)."""

    qualname: str
    worker: bool = False
    base: str | None = None
    """The vLLM class the consumer class extends or patches: what ``self`` has that the class does not define
    comes from there."""


@dataclass(frozen=True)
class Local:
    """A name bound to a consumer-defined function or class."""

    qualname: str


@dataclass(frozen=True)
class Reply:
    """What a worker RPC returned, tracked to see how the consumer uses it."""

    location: Location


@dataclass(frozen=True)
class Either:
    """A name bound by an import and by its ``except ImportError`` fallback: which one depends on the build."""

    options: tuple[tuple[Sym, GuardExpr, str], ...]
    location: Location


@dataclass(frozen=True)
class VersionValue:
    """The audited build's version as the consumer holds it: raw string, parsed, or tuple."""

    form: VersionForm


@dataclass(frozen=True)
class Lit:
    """A literal; ``parsed``: a string passed through a version parser (``Version("0.12")``)."""

    value: Any
    parsed: bool = False


Value = Sym | Obj | SelfOf | Local | VersionValue | Lit | GuardExpr | Either | Reply | None


class ScopeKind(StrEnum):
    """What kind of body a ``Scope`` binds names in."""

    MODULE = "module"
    """A module's top level."""
    CLASS = "class"
    """A class body."""
    FUNCTION = "function"
    """A function's body."""


@dataclass
class Scope:
    """The names bound in a module, class or function body as the walk reaches them."""

    names: dict[str, Value] = field(default_factory=dict)
    kind: ScopeKind = ScopeKind.MODULE
    qualname: str = ""
    local: FunctionNames | None = None
    """For a function's scope: what its statements say about its local names, read before the walk enters it
    (``compat.consumer.names``)."""


class _Untyped:
    """What an attribute holds when the walk could not tell what an assignment gave it, or when its assignments
    give it different things (``self.drafter = NgramProposer(...)`` in one branch, the consumer's own proposer in
    another): the runtime object's class is not known, so nothing read from it is judged as a vLLM class's."""

    def __repr__(self) -> str:
        return "<untyped>"


UNTYPED = _Untyped()


class ClassAttributes:
    """What ``self.x = ...`` assigned, per consumer class: qualname -> attribute -> value. Assignments that agree
    keep their value; ``None`` (the literal) gives way to the next one; any two that differ, or one the walk
    could not type (``UNTYPED``), leave the attribute untyped."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, Value | _Untyped]] = {}

    def has(self, qualname: str, name: str) -> bool:
        return name in self.values.get(qualname, ())

    def get(self, qualname: str, name: str) -> Value:
        value = self.values.get(qualname, {}).get(name)
        return None if isinstance(value, _Untyped) else value

    def set(self, qualname: str, name: str, value: Value | _Untyped) -> None:
        names = self.values.setdefault(qualname, {})
        before = names.get(name, _UNSET)
        if before is _UNSET or _is_none(before):
            names[name] = value
        elif not _is_none(value) and before != value:
            names[name] = UNTYPED

    def update(self, other: ClassAttributes) -> None:
        """Take what ``other`` learnt, as if its assignments had been made here after ours."""
        for qualname, names in other.values.items():
            for name, value in names.items():
                self.set(qualname, name, value)


_UNSET = object()


def _is_none(value: object) -> bool:
    return isinstance(value, Lit) and value.value is None
